# kve_gpu.cmake — what the CUDA and HIP backend builds share.

# Where both GPU backends land in the build tree ($KVE_BACKEND_DIR for tests).
set(KVE_GPU_BACKEND_DIR ${PROJECT_BINARY_DIR}/gpu CACHE INTERNAL "")

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
