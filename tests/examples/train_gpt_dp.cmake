# tests/examples/train_gpt_dp.cmake: train_gpt under mpirun -np NP, each rank on BATCH/NP sequences, equals one
# process on BATCH: the same global loss and gradient norm at every step within FP32 reduction-order tolerance TOL.
# -DTRAIN_GPT= -DMPIEXEC= -DNP= -DWORK= -DDATA= -DTOL= "-DARGS=extra flags" "-DMPIARGS=mpirun flags"
# ["-DMODEL=model flags for both runs"]
include(${CMAKE_CURRENT_LIST_DIR}/compare_logs.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
separate_arguments(extra UNIX_COMMAND "${ARGS}")
separate_arguments(mpiargs UNIX_COMMAND "${MPIARGS}")
separate_arguments(model UNIX_COMMAND "${MODEL}")
set(batch 8)
math(EXPR per_rank "${batch} / ${NP}")
set(common --steps 5 --seq 32 --layers 2 --heads 2 --embd 32 --lr 1e-2 --eval-every 0 --sample 0 --log-every 1
    --data ${DATA} ${model})
mpt_run(one ${TRAIN_GPT} ${common} --batch ${batch} --log-json ${WORK}/one.jsonl)
mpt_run(dp ${MPIEXEC} -n ${NP} --oversubscribe ${mpiargs} ${TRAIN_GPT} ${common} --batch ${per_rank} ${extra}
        --log-json ${WORK}/dp.jsonl)
if(NOT dp_out MATCHES "data parallel: ${NP} ranks x batch ${per_rank}")
  message(FATAL_ERROR "no data-parallel banner:\n${dp_out}")
endif()
mpt_compare_logs(${WORK}/one.jsonl ${WORK}/dp.jsonl worst steps)
message("train_gpt -n ${NP} ${ARGS}: ${steps} steps, worst relative difference of loss and grad norm ${worst} "
        "(tolerance ${TOL})")
execute_process(COMMAND awk "BEGIN { exit !(${worst} <= ${TOL}) }" RESULT_VARIABLE ok)
if(NOT ok EQUAL 0 OR steps LESS 5)
  message(FATAL_ERROR "data parallel differs from one process: ${worst} > ${TOL} (or ${steps} < 5 steps compared)")
endif()
