# tests/examples/train_gpt_resume.cmake: train_gpt run straight vs stopped halfway and resumed in a new process:
# every logged loss, lr and grad norm, the weights, the optimizer state and the checkpoint's state must match bit for
# bit. cmake -DTRAIN_GPT=... -DWORK=dir -DNAME=fp32 -DARGS="--precision fp32 ..." [-DMIN_SKIPPED=n] -P this file
separate_arguments(ARGS UNIX_COMMAND "${ARGS}")
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
if(NOT DEFINED DROPOUT)
  set(DROPOUT 0.1)  # -DDROPOUT=0 for models without dropout (Llama)
endif()
set(common --steps 8 --layers 3 --heads 2 --embd 32 --seq 32 --batch 4 --grad-accum 2 --dropout ${DROPOUT} --eval-every 4
           --eval-batches 2 --sample 0 --log-every 1 --save-every 2 --keep 2 ${ARGS})

function(train log)
  execute_process(COMMAND ${TRAIN_GPT} ${ARGN} OUTPUT_FILE ${WORK}/${log}.out ERROR_FILE ${WORK}/${log}.err
                  RESULT_VARIABLE rc)
  file(READ ${WORK}/${log}.out out)
  file(READ ${WORK}/${log}.err err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_gpt ${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
  set(${log}_out "${out}" PARENT_SCOPE)
endfunction()

train(straight ${common} --save-dir ${WORK}/A --log-json ${WORK}/A.jsonl)
train(first ${common} --save-dir ${WORK}/B --log-json ${WORK}/B.jsonl --stop-after 4)
if(NOT first_out MATCHES "stopped after step 4 of 8; resume with: train_gpt --resume ${WORK}/B")
  message(FATAL_ERROR "the first half did not stop after step 4:\n${first_out}")
endif()
train(second --resume ${WORK}/B)  # every option from the checkpoint
if(NOT second_out MATCHES "resumed from ${WORK}/B/step-00000004 at step 4")
  message(FATAL_ERROR "the second half did not resume from step 4:\n${second_out}")
endif()

# Weights and optimizer state (model.safetensors holds the FP32 masters), byte for byte.
foreach(file model.safetensors optimizer.safetensors config.json)
  file(SHA256 ${WORK}/A/step-00000008/${file} a)
  file(SHA256 ${WORK}/B/step-00000008/${file} b)
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "${file} of the resumed run differs from the straight run's")
  endif()
endforeach()
# The checkpoint's state: scaler, schedule, FP8 scaling, dropout stream, sampler, step.
file(READ ${WORK}/A/step-00000008/state.json a)
file(READ ${WORK}/B/step-00000008/state.json b)
foreach(key step grad_scaler lr_schedule fp8 rng data precision)
  string(JSON va GET "${a}" ${key})
  string(JSON vb GET "${b}" ${key})
  if(NOT va STREQUAL vb)
    message(FATAL_ERROR "state.json key \"${key}\" differs:\nstraight: ${va}\nresumed: ${vb}")
  endif()
endforeach()
# keep 2: only the two newest checkpoints remain.
file(GLOB kept RELATIVE ${WORK}/B ${WORK}/B/step-*)
if(NOT kept STREQUAL "step-00000006;step-00000008")
  message(FATAL_ERROR "--keep 2 left ${kept}")
endif()

# The logs: the same records in the same order (the first half's records kept once, no step twice), equal but for
# the timing (tokens per second, data wait, MFU).
function(records path out)
  file(STRINGS ${path} lines)
  set(result "")
  foreach(line IN LISTS lines)
    string(JSON line REMOVE "${line}" tokens_per_s)
    string(JSON line REMOVE "${line}" data_wait_ms)
    string(JSON line REMOVE "${line}" mfu)
    list(APPEND result "${line}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()
records(${WORK}/A.jsonl a)
records(${WORK}/B.jsonl b)
if(NOT a STREQUAL b)
  string(REPLACE ";" "\n" a "${a}")
  string(REPLACE ";" "\n" b "${b}")
  message(FATAL_ERROR "the logs differ:\nstraight:\n${a}\nresumed:\n${b}")
endif()
# fp16 with a huge initial loss scale: steps must have been skipped (the resume then restored the count).
list(GET b -1 final)
string(JSON skipped GET "${final}" skipped)
if(DEFINED MIN_SKIPPED AND skipped LESS MIN_SKIPPED)
  message(FATAL_ERROR "expected at least ${MIN_SKIPPED} skipped steps, the run skipped ${skipped}")
endif()
message(STATUS "${NAME}: straight and resumed runs match bit for bit (${skipped} steps skipped)")
