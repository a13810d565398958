# tests/examples/train_gpt_dp_resume.cmake: a ZeRO-1 run on 4 ranks stopped at step 3 (each rank saves its optimizer
# shard) and resumed on 2 ranks (re-sharded) and on 1 process (merged) continues like the uninterrupted run: the
# losses and gradient norms of steps 3..5 match within FP32 reduction-order tolerance TOL.
# -DTRAIN_GPT= -DMPIEXEC= -DWORK= -DDATA= -DTOL= "-DMPIARGS=mpirun flags"
include(${CMAKE_CURRENT_LIST_DIR}/compare_logs.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
separate_arguments(mpiargs UNIX_COMMAND "${MPIARGS}")
set(common --steps 6 --seq 32 --layers 2 --heads 2 --embd 32 --lr 1e-2 --eval-every 0 --sample 0 --log-every 1
    --data ${DATA} --moments int8)
set(mpi ${MPIEXEC} --oversubscribe ${mpiargs})
mpt_run(full ${mpi} -n 4 ${TRAIN_GPT} ${common} --batch 2 --zero1 --log-json ${WORK}/full.jsonl)
mpt_run(stopped ${mpi} -n 4 ${TRAIN_GPT} ${common} --batch 2 --zero1 --save-dir ${WORK}/ckpt --stop-after 3
        --log-json ${WORK}/stopped.jsonl)
foreach(r 0 1 2 3)
  if(NOT EXISTS ${WORK}/ckpt/step-00000003/optimizer-rank0000${r}-of-00004.safetensors)
    message(FATAL_ERROR "no optimizer shard of rank ${r}:\n${stopped_out}")
  endif()
endforeach()
# Each resumed run continues saving into the directory it resumed from: one copy each.
foreach(copy two one)
  file(COPY ${WORK}/ckpt/ DESTINATION ${WORK}/ckpt_${copy})
endforeach()
mpt_run(two ${mpi} -n 2 ${TRAIN_GPT} --resume ${WORK}/ckpt_two --batch 4 --zero1 --log-json ${WORK}/two.jsonl)
mpt_run(one ${TRAIN_GPT} --resume ${WORK}/ckpt_one --batch 8 --log-json ${WORK}/one.jsonl)
if(NOT EXISTS ${WORK}/ckpt_two/step-00000006/optimizer-rank00001-of-00002.safetensors)
  message(FATAL_ERROR "the 2-rank run did not save its own shards at the end:\n${two_out}")
endif()
set(failed FALSE)
foreach(run two one)
  mpt_compare_logs(${WORK}/full.jsonl ${WORK}/${run}.jsonl worst steps)
  message("resumed on ${run} rank(s) from 4: ${steps} steps, worst relative difference of loss and grad norm ${worst} "
          "(tolerance ${TOL})")
  execute_process(COMMAND awk "BEGIN { exit !(${worst} <= ${TOL}) }" RESULT_VARIABLE ok)
  if(NOT ok EQUAL 0 OR NOT steps EQUAL 3)
    set(failed TRUE)
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "a resumed run differs from the uninterrupted one (or did not run steps 3..5)")
endif()
