# Glue that finds the external libraries and names them as imported targets. Nothing is vendored:
# scripts/setup.sh installs Debian's packages; the NVIDIA libraries come with the CUDA toolkit or,
# on machines that have them only there, inside Python's nvidia-* wheels.

find_package(Threads REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)  # Eigen3::Eigen (the CPU classifier's matrix products)
include(${CMAKE_CURRENT_LIST_DIR}/onednn.cmake)  # cutrain::dnnl (the CPU convolutions)
find_package(OpenMP REQUIRED COMPONENTS CXX)  # OpenMP::OpenMP_CXX (the CPU kernels' threads, kernels/base/cpu_threads.h)
find_package(CLI11 REQUIRED)                 # CLI11::CLI11
find_package(nlohmann_json 3 REQUIRED)       # nlohmann_json::nlohmann_json
find_package(Gloo REQUIRED)                  # gloo (CPU collectives)

if(CUTRAIN_EMULATED)
  # The emulation is compiled into cutrain_kernels (kernels/CMakeLists.txt); the names of the CUDA
  # runtime, cuBLAS, cuDNN and NCCL stand for nothing more there.
  foreach(library CUDA::cudart CUDA::cublas cutrain::cudnn cutrain::nccl)
    add_library(${library} INTERFACE IMPORTED)
  endforeach()
else()
  find_package(CUDAToolkit REQUIRED)  # CUDA::cudart, CUDA::cublas
  # Where Python's nvidia-* wheels keep cuDNN and NCCL, if a python3 with them is on PATH.
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(_nvidia_wheel_roots "")
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))"
      OUTPUT_VARIABLE _site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_site)
      file(GLOB _nvidia_wheel_roots "${_site}/nvidia/cudnn" "${_site}/nvidia/nccl" "${_site}/nvidia/cu*")
    endif()
  endif()

  # find_nvidia_library(NAME HEADER LIBRARY ROOT_VAR): an imported target cutrain::NAME from the
  # toolkit, from $ROOT_VAR (a CMake or environment variable), or from the Python wheels.
  function(find_nvidia_library name header library root_var)
    set(_hints ${${root_var}} $ENV{${root_var}} ${CUDAToolkit_LIBRARY_ROOT} ${_nvidia_wheel_roots})
    find_path(${name}_INCLUDE_DIR ${header}
      HINTS ${_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include REQUIRED)
    find_library(${name}_LIBRARY NAMES ${library} lib${library}.so.9 lib${library}.so.2
      HINTS ${_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64 REQUIRED)
    add_library(cutrain::${name} UNKNOWN IMPORTED)
    set_target_properties(cutrain::${name} PROPERTIES
      IMPORTED_LOCATION "${${name}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${name}_INCLUDE_DIR}")
    message(STATUS "cutrain: ${name} at ${${name}_LIBRARY}")
  endfunction()

  find_nvidia_library(cudnn cudnn.h cudnn CUDNN_ROOT)
  find_nvidia_library(nccl nccl.h nccl NCCL_ROOT)
endif()

# stb: Debian's libstb-dev ships the headers and a compiled libstb with the implementations.
find_path(STB_INCLUDE_DIR stb_image.h PATH_SUFFIXES stb REQUIRED)
find_library(STB_LIBRARY stb REQUIRED)
add_library(cutrain::stb UNKNOWN IMPORTED)
set_target_properties(cutrain::stb PROPERTIES
  IMPORTED_LOCATION "${STB_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${STB_INCLUDE_DIR}")

# Gloo's exported target carries no include directory of its own dependencies; it needs none more.
add_library(cutrain::gloo INTERFACE IMPORTED)
target_link_libraries(cutrain::gloo INTERFACE gloo Threads::Threads)
