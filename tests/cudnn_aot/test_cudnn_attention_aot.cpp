// tests/cudnn_aot/test_cudnn_attention_aot.cpp: the cuDNN causal-attention graphs, with and without key padding,
// checked without a GPU against described sm_90 and sm_80 devices (deviceless ahead-of-time compilation), with
// negative controls.
//
// How this works without a GPU: cuDNN >= 9.8 builds plans for a CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR instead of a
// handle. Its heuristics and NVRTC compilation still resolve libcuda symbols, so ctest puts the toolkit's stub
// libcuda (as libcuda.so.1, in a private directory: tests/cudnn_aot/CMakeLists.txt) first on LD_LIBRARY_PATH.
// Without the stub, heuristics return 0 engine configs for every graph. With it they return configs, and plan
// finalize compiles the engine and then fails exactly where a module must be loaded onto a device: the stub's
// cuLibraryLoadData returns 34 (CUDA_ERROR_STUB_LIBRARY) and cuDNN reports CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER.
// Numerics and workspace sizes still need a GPU (tests/gpu).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "kernels/cuda/lib/attention_cudnn.h"

namespace {

using namespace mpt::kernels::cuda;

// The fields cuDNN 9.19 reads from CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION (all required; found by parsing
// errors, then checked against the serialisation cuDNN writes back). Values: the public specifications of an
// H100 SXM5 80GB and an A100 SXM4 80GB. deviceVer is major * 100 + minor * 10, driverVer CUDA 13.0's 13000.
std::string device_json(int sm_major) {
  const bool hopper = sm_major == 9;
  return std::string(R"({"maxGridSize":[2147483647,65535,65535],"maxBlockSize":[1024,1024,64],)") +
         R"("regsPerBlock":65536,"multiProcessorCount":)" + (hopper ? "132" : "108") +
         R"(,"warpSize":32,"maxSharedMemoryPerBlock":49152,"maxSharedMemoryPerBlockOptin":)" +
         (hopper ? "232448" : "166912") +
         R"(,"reservedSharedMemoryPerBlock":1024,"maxRegistersPerSM":65536,"maxCtasPerSM":32,)"
         R"("maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,"pciDeviceId":0,"isTccDriver":0,"supportCoopLaunch":1,)"
         R"("totalGlobalMem":)" + (hopper ? "85031714816" : "85089648640") + R"(,"smClockRateKHz":)" +
         (hopper ? "1980000" : "1410000") + R"(,"memClockRateKHz":)" + (hopper ? "2619000" : "1593000") +
         R"(,"l2CacheSize":)" + (hopper ? "52428800" : "41943040") + R"(,"cudaDeviceId":0,"deviceVer":)" +
         (hopper ? "900" : "800") + R"(,"driverVer":13000,"deviceName":")" +
         (hopper ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-80GB") + R"("})";
}

// GPT-2 small: B=4, H=12, T=1024, D=64, causal; h_kv < 12: grouped-query attention (Llama's), token_major: q, k, v
// and o read and written where the projections keep them.
CudnnAttentionProblem gpt_problem(bool bf16, int64_t d = 64, bool padded = false, bool packed = false,
                                  int64_t h_kv = 0, bool token_major = false) {
  return {4, 12, 1024, d, bf16, 0.125f, padded, packed, h_kv, token_major};
}

size_t config_count(const CudnnAttentionProblem& p, AttentionPass pass, int sm_major,
                    const CudnnGraphOptions& options = {}) {
  const CudnnDescriptor device = cudnn_device_properties(device_json(sm_major));
  const CudnnTarget target{nullptr, device.get()};
  const auto graph = build_cudnn_attention_graph(p, pass, target, options);
  return cudnn_engine_configs(*graph, target).size();
}

TEST(CudnnAttentionAot, StubDriverIsTheOneLoaded) {
  // The precondition of every other case: the stub answers, so no real driver (and no GPU) is involved.
  int count = -1;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorStubLibrary)
      << "run through ctest, which puts the stub libcuda.so.1 on LD_LIBRARY_PATH";
  (void)cudaGetLastError();
}

TEST(CudnnAttentionAot, DevicePropertiesRoundTrip) {
  for (int sm : {8, 9}) {
    const CudnnDescriptor d = cudnn_device_properties(device_json(sm));
    int64_t n = 0;
    std::string back(4096, '\0');
    ASSERT_EQ(cudnnBackendGetAttribute(d.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                       int64_t(back.size()), &n, back.data()),
              CUDNN_STATUS_SUCCESS);
    back.resize(size_t(n));
    EXPECT_EQ(back, device_json(sm));
  }
  try {  // errors name the call, the descriptor, cuDNN's status and its last error text
    cudnn_device_properties(R"({"warpSize":32})");
    FAIL() << "accepted device properties without maxGridSize";
  } catch (const CudnnError& e) {
    EXPECT_EQ(e.status(), CUDNN_STATUS_BAD_PARAM);
    EXPECT_NE(std::string(e.what()).find("cudnnBackendFinalize(DEVICEPROP 'from JSON') failed: CUDNN_STATUS_BAD_PARAM "
                                         "(2000): !json_object.HasMember(\"maxGridSize\")"),
              std::string::npos)
        << e.what();
  }
}

// Every engine config's plan compiles and fails only at module load, the documented deviceless outcome.
void expect_finalize_reaches_module_load(const std::vector<CudnnDescriptor>& configs, const CudnnTarget& target) {
  for (size_t i = 0; i < configs.size(); ++i) {
    CudnnDescriptor plan;
    std::string detail;
    const cudnnStatus_t status = try_cudnn_plan(configs[i], target, &plan, &detail);
    EXPECT_EQ(status, CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) << "config " << i << ": " << detail;
    EXPECT_NE(detail.find("cuLibraryLoadData returned error"), std::string::npos) << detail;
    EXPECT_NE(detail.find("(34)"), std::string::npos) << detail;
    EXPECT_EQ(plan.get(), nullptr);
  }
}

struct Case {
  int sm_major;
  bool bf16;
  AttentionPass pass;
  size_t configs;  // engine configs cuDNN 9.19 returns (CUDNN_HEUR_MODE_A)
  bool padded = false;
  int64_t d = 64;
  bool packed = false;
  int64_t h_kv = 0;
  bool token_major = false;
};

std::string case_name(const Case& c) {
  return std::string("sm") + (c.sm_major == 9 ? "90" : "80") + (c.bf16 ? "_bf16" : "_f16") +
         (c.pass == AttentionPass::Forward ? "_forward" : "_backward") +
         (c.padded ? "_padded_d" + std::to_string(c.d) : c.d != 64 ? "_d" + std::to_string(c.d) : std::string()) +
         (c.packed ? "_packed" : "") +
         (c.h_kv > 0 ? "_kv" + std::to_string(c.h_kv) : std::string()) + (c.token_major ? "_token_major" : "");
}
std::string param_name(const testing::TestParamInfo<Case>& info) { return case_name(info.param); }
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c) << " (" << c.configs << " configs)"; }

class GptShape : public testing::TestWithParam<Case> {};

// Heuristics accept the graph (>= 1 engine config; the exact counts cuDNN 9.19 gives are asserted so a change
// is noticed), and every config's plan compiles and fails only at module load, the documented deviceless outcome.
// Padded graphs add the padding mask's 6 operations and the GEMM extent overrides.
TEST_P(GptShape, EngineConfigsFinalizeUpToModuleLoad) {
  const Case& c = GetParam();
  const CudnnDescriptor device = cudnn_device_properties(device_json(c.sm_major));
  const CudnnTarget target{nullptr, device.get()};
  const auto graph = build_cudnn_attention_graph(gpt_problem(c.bf16, c.d, c.padded, c.packed, c.h_kv, c.token_major),
                                                 c.pass, target);
  const bool grouped = c.h_kv > 0 && c.h_kv != 12;
  EXPECT_EQ(graph->op_count,
            (c.pass == AttentionPass::Forward ? 14 : 22 + (grouped ? 2 : 0)) + (c.padded ? 6 : 0));
  const std::vector<CudnnDescriptor> configs = cudnn_engine_configs(*graph, target);
  ASSERT_GE(configs.size(), 1u);
  EXPECT_EQ(configs.size(), c.configs);
  expect_finalize_reaches_module_load(configs, target);
}

INSTANTIATE_TEST_SUITE_P(CudnnAttentionAot, GptShape,
                         testing::Values(Case{9, true, AttentionPass::Forward, 4},
                                         Case{9, false, AttentionPass::Forward, 4},
                                         Case{9, true, AttentionPass::Backward, 3},
                                         Case{9, false, AttentionPass::Backward, 3},
                                         Case{8, true, AttentionPass::Forward, 3},
                                         Case{8, false, AttentionPass::Forward, 3},
                                         Case{8, true, AttentionPass::Backward, 3},
                                         Case{8, false, AttentionPass::Backward, 3}),
                         param_name);

INSTANTIATE_TEST_SUITE_P(CudnnAttentionAotPadded, GptShape,
                         testing::Values(Case{9, true, AttentionPass::Forward, 4, true, 64},
                                         Case{9, false, AttentionPass::Forward, 4, true, 64},
                                         Case{9, true, AttentionPass::Backward, 3, true, 64},
                                         Case{9, false, AttentionPass::Backward, 3, true, 64},
                                         Case{8, true, AttentionPass::Forward, 3, true, 64},
                                         Case{8, false, AttentionPass::Forward, 3, true, 64},
                                         Case{8, true, AttentionPass::Backward, 3, true, 64},
                                         Case{8, false, AttentionPass::Backward, 3, true, 64},
                                         Case{9, true, AttentionPass::Forward, 2, true, 128},
                                         Case{9, false, AttentionPass::Forward, 2, true, 128},
                                         Case{9, true, AttentionPass::Backward, 2, true, 128},
                                         Case{9, false, AttentionPass::Backward, 2, true, 128},
                                         Case{8, true, AttentionPass::Forward, 1, true, 128},
                                         Case{8, false, AttentionPass::Forward, 1, true, 128},
                                         Case{8, true, AttentionPass::Backward, 2, true, 128},
                                         Case{8, false, AttentionPass::Backward, 2, true, 128}),
                         param_name);

// GPT's layout (CudnnAttentionProblem::packed: q, k, v read from the fused QKV projection's (B, T, 3, H, D) output,
// o and do in (B, T, H, D), dq, dk, dv written into one (B, T, 3, H, D) gradient), plain and key-padded. The
// heuristics accept strided operands, so this proves the engines exist for the layout, not that the strides say
// what the op means: tests/ops/test_attention_qkv.cpp runs the same strides through the CPU kernel against the
// head-major op, and tests/gpu on a GPU.
INSTANTIATE_TEST_SUITE_P(CudnnAttentionAotPacked, GptShape,
                         testing::Values(Case{9, true, AttentionPass::Forward, 4, false, 64, true},
                                         Case{9, true, AttentionPass::Backward, 3, false, 64, true},
                                         Case{8, true, AttentionPass::Forward, 3, false, 64, true},
                                         Case{8, true, AttentionPass::Backward, 3, false, 64, true},
                                         Case{9, false, AttentionPass::Backward, 3, false, 64, true},
                                         Case{9, true, AttentionPass::Forward, 4, true, 64, true},
                                         Case{9, true, AttentionPass::Backward, 3, true, 64, true},
                                         Case{8, true, AttentionPass::Backward, 3, true, 64, true}),
                         param_name);

// Llama's layout: grouped-query attention (12 query heads over 4 or 1 kv heads, read in place; backward sums each
// group's dK and dV with a reduction, as cudnn-frontend does) and token-major operands (each of q, k, v, o its own
// (B, T, heads, D) buffer), plain and key-padded. As for the packed layout, this proves the engines exist for the
// graphs; tests/emu_backend runs their strides and head mapping against the multi-head graph, and tests/gpu on a GPU.
INSTANTIATE_TEST_SUITE_P(CudnnAttentionAotGrouped, GptShape,
                         testing::Values(Case{9, true, AttentionPass::Forward, 4, false, 64, false, 4, true},
                                         Case{9, true, AttentionPass::Backward, 3, false, 64, false, 4, true},
                                         Case{9, false, AttentionPass::Backward, 3, false, 64, false, 4, true},
                                         Case{8, true, AttentionPass::Forward, 3, false, 64, false, 4, true},
                                         Case{8, true, AttentionPass::Backward, 3, false, 64, false, 4, true},
                                         Case{9, true, AttentionPass::Forward, 4, true, 64, false, 4, true},
                                         Case{9, true, AttentionPass::Backward, 3, true, 64, false, 4, true},
                                         Case{8, true, AttentionPass::Backward, 3, true, 64, false, 4, true},
                                         Case{9, true, AttentionPass::Backward, 3, false, 64, false, 1, true},
                                         Case{9, true, AttentionPass::Backward, 3, false, 64, false, 4, false},
                                         Case{9, true, AttentionPass::Backward, 3, false, 64, false, 12, true},
                                         Case{9, true, AttentionPass::Backward, 2, false, 128, false, 4, true}),
                         param_name);

// Llama's packed row (ops::rope_qkv's output read in place: each token's 12 q heads, 4 or 1 k heads, as many v heads;
// d(qkv) written as one tensor), plain and key-padded: the grouped graphs at the packed row's strides. As above, the
// engines exist; tests/ops/test_attention_qkv.cpp holds the strides to the head-major op on the CPU kernel and
// tests/emu_backend to the token-major graph.
INSTANTIATE_TEST_SUITE_P(CudnnAttentionAotGroupedPacked, GptShape,
                         testing::Values(Case{9, true, AttentionPass::Forward, 4, false, 64, true, 4},
                                         Case{9, true, AttentionPass::Backward, 3, false, 64, true, 4},
                                         Case{9, false, AttentionPass::Backward, 3, false, 64, true, 4},
                                         Case{8, true, AttentionPass::Forward, 3, false, 64, true, 4},
                                         Case{8, true, AttentionPass::Backward, 3, false, 64, true, 4},
                                         Case{9, true, AttentionPass::Forward, 4, true, 64, true, 4},
                                         Case{9, true, AttentionPass::Backward, 3, true, 64, true, 4},
                                         Case{9, true, AttentionPass::Backward, 3, false, 64, true, 1}),
                         param_name);

// The shape tests/gpu's GpuAttention.KeyPaddedForwardAndBackwardMatchCpu runs on cuDNN (B=3, H=2, T=77, D=32, bf16,
// lengths {77, 30, 1}): T is no multiple of the engine's tiles, D is small. Both passes, both described devices.
TEST(CudnnAttentionAot, GpuTestPaddedShapeFinalizesUpToModuleLoad) {
  const CudnnAttentionProblem p{3, 2, 77, 32, true, 0.17677669f, true};
  for (int sm : {9, 8}) {
    for (AttentionPass pass : {AttentionPass::Forward, AttentionPass::Backward}) {
      SCOPED_TRACE(testing::Message() << "sm_" << sm << "0 "
                                      << (pass == AttentionPass::Forward ? "forward" : "backward"));
      EXPECT_TRUE(cudnn_attention_supported(p, pass, sm, 0));
      const CudnnDescriptor device = cudnn_device_properties(device_json(sm));
      const CudnnTarget target{nullptr, device.get()};
      const auto graph = build_cudnn_attention_graph(p, pass, target);
      const std::vector<CudnnDescriptor> configs = cudnn_engine_configs(*graph, target);
      EXPECT_GE(configs.size(), 1u);
      expect_finalize_reaches_module_load(configs, target);
    }
  }
}

// The plan class tries the configs in order and reports the last failure with its status.
TEST(CudnnAttentionAot, PlanReportsTheFinalizeFailure) {
  const CudnnDescriptor device = cudnn_device_properties(device_json(9));
  try {
    CudnnAttentionPlan plan(gpt_problem(true), AttentionPass::Forward, CudnnTarget{nullptr, device.get()});
    FAIL() << "a deviceless plan cannot load its module";
  } catch (const CudnnError& e) {
    EXPECT_EQ(e.status(), CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
    EXPECT_NE(std::string(e.what()).find("for all 4 engine configs"), std::string::npos) << e.what();
  }
}

// Negative controls: graphs cuDNN must refuse, proving the positive cases could fail.
TEST(CudnnAttentionAot, HeadDim100HasNoEngine) {
  for (AttentionPass pass : {AttentionPass::Forward, AttentionPass::Backward}) {
    EXPECT_EQ(config_count(gpt_problem(true, 100), pass, 9), 0u);
    EXPECT_EQ(config_count(gpt_problem(true, 100), pass, 8), 0u);
  }
}

TEST(CudnnAttentionAot, ProbabilitiesInF32HaveNoEngine) {
  EXPECT_EQ(config_count(gpt_problem(true), AttentionPass::Forward, 9, {.probs_f32 = true}), 0u);
  EXPECT_EQ(config_count(gpt_problem(false), AttentionPass::Forward, 8, {.probs_f32 = true}), 0u);
}

TEST(CudnnAttentionAot, HeadDim256BackwardOnlyOnHopper) {
  for (bool padded : {false, true}) {
    EXPECT_EQ(config_count(gpt_problem(true, 256, padded), AttentionPass::Backward, 8), 0u) << padded;
    EXPECT_GE(config_count(gpt_problem(true, 256, padded), AttentionPass::Backward, 9), 1u) << padded;
    EXPECT_GE(config_count(gpt_problem(true, 256, padded), AttentionPass::Forward, 8), 1u) << padded;
  }
}

// The padded graphs' negative control: the same padding mask comparing with CMP_GE instead of CMP_LT (keeping the
// padding instead of the real positions) finds no engine, in either pass, on either device. So the engine matches
// the padding subgraph it is given rather than accepting any pointwise chain between the GEMMs, and the padded
// cases above are recognised. (cuDNN 9.19 does accept seq_len tensors declared f32, and the padding mask placed
// after the causal one: neither is a control.)
TEST(CudnnAttentionAot, PaddingMaskComparingTheWrongWayHasNoEngine) {
  for (int sm : {9, 8}) {
    for (AttentionPass pass : {AttentionPass::Forward, AttentionPass::Backward}) {
      for (bool bf16 : {true, false}) {
        EXPECT_EQ(config_count(gpt_problem(bf16, 64, true), pass, sm, {.padding_compare_ge = true}), 0u)
            << "sm_" << sm << "0 " << (pass == AttentionPass::Forward ? "forward" : "backward") << " bf16 " << bf16;
        EXPECT_GE(config_count(gpt_problem(bf16, 64, true), pass, sm), 1u);  // the same graph, compared right
      }
    }
  }
}

// The static rules agree with what the heuristics said above.
TEST(CudnnAttentionAot, SupportRulesMatchTheHeuristics) {
  using P = AttentionPass;
  EXPECT_TRUE(cudnn_attention_supported(gpt_problem(true), 9, 0));
  EXPECT_TRUE(cudnn_attention_supported(gpt_problem(false), 8, 0));
  EXPECT_FALSE(cudnn_attention_supported(gpt_problem(true, 100), 9, 0));
  EXPECT_FALSE(cudnn_attention_supported(gpt_problem(true, 256), P::Backward, 8, 0));
  EXPECT_TRUE(cudnn_attention_supported(gpt_problem(true, 256), P::Forward, 8, 0));
  EXPECT_TRUE(cudnn_attention_supported(gpt_problem(true, 256), P::Backward, 9, 0));
  EXPECT_FALSE(cudnn_attention_supported(gpt_problem(true, 264), P::Forward, 9, 0));
  EXPECT_FALSE(cudnn_attention_supported(gpt_problem(true), 7, 5));
  EXPECT_FALSE(cudnn_attention_supported(gpt_problem(true, 256), P::Forward, 8, 9));
  EXPECT_STREQ(cudnn_attention_unsupported(gpt_problem(true, 100), P::Forward, 9, 0),
               "the head dimension must be a multiple of 8");
  // Key padding adds no rule: the padded graphs above find engines wherever the unpadded ones do.
  EXPECT_TRUE(cudnn_attention_supported(gpt_problem(true, 64, true), 9, 0));
  EXPECT_TRUE(cudnn_attention_supported(gpt_problem(false, 128, true), 8, 0));
  EXPECT_FALSE(cudnn_attention_supported(gpt_problem(true, 256, true), P::Backward, 8, 0));
}

}  // namespace
