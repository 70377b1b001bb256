# oneDNN (Debian's libdnnl-dev), the CPU convolutions, as the imported target cutrain::dnnl.
# Debian's own dnnl-config.cmake demands OpenCL's headers for the GPU runtime that its build also
# has; the CPU engine needs neither, so the header and library are found directly, as stb's are.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp REQUIRED)
find_library(DNNL_LIBRARY dnnl REQUIRED)
add_library(cutrain::dnnl UNKNOWN IMPORTED)
set_target_properties(cutrain::dnnl PROPERTIES
  IMPORTED_LOCATION "${DNNL_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
