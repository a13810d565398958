// tests/compile_fail/spilling_kernel.cu: a kernel that needs local memory, to prove the spill guard rejects it.
__global__ void mpt_test_local_memory_kernel(float* out, int n) {
  float a[256];  // dynamically indexed: ptxas must put it in local memory
  for (int i = 0; i < 256; ++i) a[i] = out[(i * 7 + threadIdx.x) % n];
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[(i * 13) % 256];
  out[threadIdx.x] = s;
}
