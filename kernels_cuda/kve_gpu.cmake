# kve_gpu.cmake — what the CUDA and HIP backend builds share.

# Where both GPU backends land in the build tree: next to libkvevict.so (the
# top of the build tree), where the core looks first (frontend/registry.c), as
# cmake --install puts them next to the installed library.
if(CMAKE_LIBRARY_OUTPUT_DIRECTORY)
  set(KVE_GPU_BACKEND_DIR ${CMAKE_LIBRARY_OUTPUT_DIRECTORY} CACHE INTERNAL "")
else()
  set(KVE_GPU_BACKEND_DIR ${PROJECT_BINARY_DIR} CACHE INTERNAL "")
endif()

# kve_gpu_mode(<AUTO|ON|OFF value> <out>): the value upper-cased, or a
# configure error naming the option.
function(kve_gpu_mode option out)
  string(TOUPPER "${${option}}" mode)
  if(NOT mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${option}=${${option}}: expected AUTO, ON or OFF")
  endif()
  set(${out} ${mode} PARENT_SCOPE)
endfunction()

# kve_gpu_missing(<mode> <what>): fail under ON, else say what is skipped.
macro(kve_gpu_missing mode what)
  if(${mode} STREQUAL "ON")
    message(FATAL_ERROR "${what}")
  endif()
  message(STATUS "kvevict: ${what}: not built")
endmacro()
