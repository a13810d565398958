# tests/examples/qat_export.cmake: the quantization programs end to end on the built-in text: a GPT and a Llama
# trained, INT4 QAT from the GPT (PTQ and FP32 reported first; a resume with another group refused; with learned scales
# too), mpt-export to GGUF and compressed-tensors (and its refusals, nothing written), generate with quantized Linear
# layers.
# cmake -DBIN=<examples dir> -DWORK=dir -P this file
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run name expect_rc pattern)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL expect_rc OR NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "${name}: exit ${rc} (expected ${expect_rc}), output does not match '${pattern}':\n${out}\n${err}")
  endif()
endfunction()

set(shape --batch 8 --seq 32 --layers 2 --heads 2 --embd 32 --log-every 10 --eval-batches 2 --sample 0)
run(train 0 "final val loss" ${BIN}/train_gpt ${shape} --steps 30 --save-dir ${WORK}/gpt)
run(qat 0 "precision: fp32\\+qat-int4-g32.*before QAT: val loss [0-9.]+ \\(fp32\\) \\| [0-9.]+ quantized \\(int4-g32, post-training quantization\\).*final val loss"
    ${BIN}/train_gpt ${shape} --init-from ${WORK}/gpt --qat int4 --save-dir ${WORK}/qat --steps 10)
run(resume_with_another_group 1 "fp32\\+qat-int4-g32" ${BIN}/train_gpt --resume ${WORK}/qat --qat-group 128 --steps 12)
run(plan 0 "blk.0.attn_qkv.weight +\\[96, 32\\] Q4_0" ${BIN}/mpt-export ${WORK}/qat --format gguf-q4_0 --plan)
run(gguf 0 "wrote ${WORK}/model.gguf \\([0-9.]+ MB, 28 tensors\\)"
    ${BIN}/mpt-export ${WORK}/qat --format gguf-q4_0 --out ${WORK}/model.gguf)
run(ct_gpt2 1 "mpt-export: \\[export\\] ct-int4: compressed-tensors quantizes nn.Linear layers"
    ${BIN}/mpt-export ${WORK}/qat --format ct-int4 --out ${WORK}/ct)
run(bad_format 1 "unknown format 'gguf-q2_k'" ${BIN}/mpt-export ${WORK}/qat --format gguf-q2_k --out ${WORK}/x)
if(EXISTS ${WORK}/ct OR EXISTS ${WORK}/x)
  message(FATAL_ERROR "a refused export left files behind")
endif()
run(generate 0 "quantized for inference: 8 Linear layers, weights int4-g32-f16scale.*tokens/s \\(int4, greedy\\)"
    ${BIN}/generate ${WORK}/qat --quantize int4 --tokens 20 --greedy)

# Learned scales (LSQ): trained, resumable, exported on the learned grid, refused for another group, run quantized.
run(qat_lsq 0 "qat: 8 learned weight scales \\(LSQ\\).*precision: fp32\\+qat-int4-g32\\+lsq.*final val loss"
    ${BIN}/train_gpt ${shape} --init-from ${WORK}/gpt --qat int4 --qat-lsq --save-dir ${WORK}/lsq --steps 10)
run(resume_lsq 0 "resumed from .* at step 10" ${BIN}/train_gpt --resume ${WORK}/lsq --steps 12)
run(gguf_lsq 0 "wrote ${WORK}/lsq.gguf" ${BIN}/mpt-export ${WORK}/lsq --format gguf-q4_0 --out ${WORK}/lsq.gguf)
run(gguf_lsq_group 1 "learned its weight scales \\(LSQ\\) for int4-g32" ${BIN}/mpt-export ${WORK}/lsq
    --format gguf-q4_0 --group 64 --out ${WORK}/lsq64.gguf)
run(generate_lsq 0 "quantized for inference: 8 Linear layers.*tokens/s \\(int4, greedy\\)"
    ${BIN}/generate ${WORK}/lsq --quantize int4 --tokens 5 --greedy)

set(llama --model llama --tokenizer bpe --vocab-size 384 --steps 10 --batch 4 --seq 32 --layers 1 --heads 2
          --kv-heads 1 --embd 32 --log-every 10 --eval-batches 2 --sample 0)
run(train_llama 0 "final val loss" ${BIN}/train_gpt ${llama} --save-dir ${WORK}/llama)
run(ct_llama 0 "wrote ${WORK}/llama-ct" ${BIN}/mpt-export ${WORK}/llama --format ct-int8 --out ${WORK}/llama-ct)
run(llama_gguf_narrow 1 "is not a multiple of 32" ${BIN}/mpt-export ${WORK}/llama --format gguf-q4_0 --group 48
    --out ${WORK}/llama.gguf)
foreach(f config.json model.safetensors)
  if(NOT EXISTS ${WORK}/llama-ct/${f})
    message(FATAL_ERROR "the compressed-tensors export lacks ${f}")
  endif()
endforeach()
