# tests/fuzz/run.cmake: builds the fuzz targets with clang (BUILD) or runs one for a bounded time (RUN).
#   cmake -DCLANGXX=... -DSOURCE=tests/fuzz -DWORK=dir -DMODE=BUILD -P run.cmake
#   cmake -DWORK=dir -DSOURCE=tests/fuzz -DMODE=RUN -DTARGET=fuzz_x -DSECONDS=60 -P run.cmake
if(MODE STREQUAL "BUILD")
  if(NOT CLANGXX)
    message(FATAL_ERROR "the fuzz targets need clang++ with libFuzzer (Debian: clang and libclang-rt-14-dev, which "
                        "tools/install-deps.sh installs)")
  endif()
  set(launcher "")
  find_program(CCACHE ccache)
  if(CCACHE)
    set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE})
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G Ninja -DCMAKE_BUILD_TYPE=Release
                          -DCMAKE_CXX_COMPILER=${CLANGXX} ${launcher} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring the fuzz targets failed (${rc})")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "building the fuzz targets failed (${rc})")
  endif()
elseif(MODE STREQUAL "RUN")
  # The committed seeds are copied: libFuzzer adds the inputs it finds to its first corpus directory.
  set(corpus ${WORK}/corpus/${TARGET})
  file(REMOVE_RECURSE ${corpus})
  string(REPLACE "fuzz_" "" seeds ${TARGET})
  file(COPY ${SOURCE}/corpus/${seeds}/ DESTINATION ${corpus})
  execute_process(COMMAND ${WORK}/build/${TARGET} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048
                          -max_len=65536 -print_final_stats=1 -artifact_prefix=${WORK}/ ${corpus}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${TARGET} found a failing input (exit ${rc}); it is saved under ${WORK}/ (crash-*, "
                        "timeout-*, leak-*, oom-*): reproduce with ${WORK}/build/${TARGET} <file>")
  endif()
else()
  message(FATAL_ERROR "MODE must be BUILD or RUN")
endif()
