# cmake/MptCuda.cmake: MPT_CUDA=AUTO|ON|OFF, target architectures, the toolkit libraries and the spill guard.
set(MPT_WITH_CUDA OFF)
if(NOT MPT_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(MPT_WITH_CUDA ON)
  elseif(MPT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MPT_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    message(STATUS "mptrain: nvcc not found, building the CPU backend only")
  endif()
endif()

if(MPT_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80-real;80-virtual;89-real;90-real;90a-real")
  endif()
  enable_language(CUDA)
  # fmt/dnnl export /usr/include; passed to nvcc as -isystem it breaks libstdc++'s #include_next <math.h>.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
  # CMake 3.25 knows no C++20 flag for nvcc; nvcc 12+ accepts -std=c++20.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  find_library(MPT_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_library(MPT_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_path(MPT_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  find_path(MPT_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)

  # Every .cu reports its resource usage; a spill or local-memory use fails the build (spill guard).
  set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} --resource-usage -Xptxas=-warn-spills,-warn-lmem-usage")
  set(CMAKE_CUDA_COMPILER_LAUNCHER bash ${PROJECT_SOURCE_DIR}/cmake/nvcc-spill-guard.sh
      ${PROJECT_SOURCE_DIR}/cmake/spill-allowlist.txt ${MPT_CCACHE})
  message(STATUS "mptrain: CUDA backend ON (${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES})")
endif()
