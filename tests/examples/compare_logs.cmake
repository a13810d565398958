# tests/examples/compare_logs.cmake: mpt_compare_logs(REF OTHER OUT_WORST OUT_STEPS): the worst relative difference
# of "loss" and "grad_norm" between two train_gpt --log-json files, over the steps OTHER logs (each must be in REF).
function(mpt_compare_logs ref other out_worst out_steps)
  file(STRINGS ${ref} ref_lines)
  file(STRINGS ${other} other_lines)
  set(worst 0)
  set(steps 0)
  foreach(line IN LISTS other_lines)
    string(JSON step ERROR_VARIABLE e GET "${line}" step)
    string(JSON loss ERROR_VARIABLE no_loss GET "${line}" loss)
    if(no_loss OR e)
      continue()
    endif()
    string(JSON norm GET "${line}" grad_norm)
    set(found FALSE)
    foreach(r IN LISTS ref_lines)
      string(JSON s2 ERROR_VARIABLE e2 GET "${r}" step)
      string(JSON l2 ERROR_VARIABLE no2 GET "${r}" loss)
      if(NOT e2 AND NOT no2 AND s2 EQUAL step)
        string(JSON n2 GET "${r}" grad_norm)
        set(found TRUE)
        # |a - b| / |b| with awk: CMake has no floating-point math.
        execute_process(COMMAND awk "BEGIN { w = ${worst}; split(\"${loss} ${l2} ${norm} ${n2}\", v, \" \");
                                             for (i = 1; i < 4; i += 2) { d = v[i] - v[i + 1]; if (d < 0) d = -d;
                                             m = v[i + 1] < 0 ? -v[i + 1] : v[i + 1]; if (m < 1e-30) m = 1e-30;
                                             if (d / m > w) w = d / m }; printf \"%.3g\", w }"
                        OUTPUT_VARIABLE worst)
      endif()
    endforeach()
    if(NOT found)
      message(FATAL_ERROR "step ${step} of ${other} is not in ${ref}")
    endif()
    math(EXPR steps "${steps} + 1")
  endforeach()
  set(${out_worst} ${worst} PARENT_SCOPE)
  set(${out_steps} ${steps} PARENT_SCOPE)
endfunction()

# mpt_run(NAME COMMAND...): runs the command, fails the test with its output unless it succeeds; sets NAME_out.
function(mpt_run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(${name}_out "${out}" PARENT_SCOPE)
endfunction()
