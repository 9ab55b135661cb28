# Finds the parts of the CUDA toolkit stitchd uses: ptxas, nvJitLink and libdevice.
# Everything is optional: without them the compiler works in PTX-only mode.
# Sets STITCH_PTXAS, STITCH_LIBDEVICE, STITCH_NVJITLINK_LIBRARY, STITCH_NVJITLINK_INCLUDE,
# STITCH_CUDA_DRIVER_INCLUDE (the folder of cuda.h, which the kernel loader and gpu_bench need
# to build; they open the driver itself with dlopen at run time) and STITCH_NVDISASM (the
# disassembler the static code checks read SASS with: the toolkit's, else the one
# scripts/setup installs into .venv-tools from PyPI, as a toolkit without it is common).
# -DSTITCH_WITH_CUDA_TOOLKIT=OFF ignores an installed toolkit (to build and test PTX-only mode).
option(STITCH_WITH_CUDA_TOOLKIT "Use the CUDA toolkit when one is installed" ON)
if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
if(STITCH_WITH_CUDA_TOOLKIT)
  find_package(CUDAToolkit QUIET)
endif()

set(_stitch_cuda_roots)
if(CUDAToolkit_FOUND)
  get_filename_component(_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
  list(APPEND _stitch_cuda_roots "${_root}")
endif()
list(APPEND _stitch_cuda_roots /usr/local/cuda)
if(NOT STITCH_WITH_CUDA_TOOLKIT)
  set(_stitch_cuda_roots /nonexistent)
  foreach(v STITCH_PTXAS STITCH_LIBDEVICE STITCH_NVJITLINK_LIBRARY STITCH_NVJITLINK_INCLUDE
            STITCH_CUDA_DRIVER_INCLUDE STITCH_NVDISASM)
    unset(${v} CACHE)
  endforeach()
endif()

find_program(STITCH_PTXAS ptxas HINTS ${_stitch_cuda_roots} PATH_SUFFIXES bin NO_DEFAULT_PATH)
find_file(STITCH_LIBDEVICE libdevice.10.bc HINTS ${_stitch_cuda_roots}
          PATH_SUFFIXES nvvm/libdevice NO_DEFAULT_PATH)
find_library(STITCH_NVJITLINK_LIBRARY nvJitLink HINTS ${_stitch_cuda_roots}
             PATH_SUFFIXES lib64 lib NO_DEFAULT_PATH)
find_path(STITCH_NVJITLINK_INCLUDE nvJitLink.h HINTS ${_stitch_cuda_roots}
          PATH_SUFFIXES include NO_DEFAULT_PATH)
find_path(STITCH_CUDA_DRIVER_INCLUDE cuda.h HINTS ${_stitch_cuda_roots}
          PATH_SUFFIXES include NO_DEFAULT_PATH)
find_program(STITCH_NVDISASM nvdisasm HINTS ${_stitch_cuda_roots} PATH_SUFFIXES bin
             NO_DEFAULT_PATH)
if(NOT STITCH_NVDISASM AND STITCH_WITH_CUDA_TOOLKIT)
  file(GLOB _stitch_venv_nvdisasm
       "${CMAKE_SOURCE_DIR}/.venv-tools/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm")
  if(_stitch_venv_nvdisasm)
    list(GET _stitch_venv_nvdisasm 0 _stitch_venv_nvdisasm)
    set(STITCH_NVDISASM "${_stitch_venv_nvdisasm}" CACHE FILEPATH "nvdisasm" FORCE)
  endif()
endif()

if(STITCH_PTXAS OR STITCH_NVJITLINK_LIBRARY)
  message(STATUS "stitchd: CUDA toolkit found (ptxas: ${STITCH_PTXAS}, nvJitLink: "
                 "${STITCH_NVJITLINK_LIBRARY}, libdevice: ${STITCH_LIBDEVICE})")
  if(STITCH_NVDISASM)
    message(STATUS "stitchd: the code checks read SASS with ${STITCH_NVDISASM}")
  else()
    message(STATUS "stitchd: no nvdisasm; the code checks read loads in flight from the PTX")
  endif()
else()
  message(STATUS "stitchd: no CUDA toolkit found; building in PTX-only mode "
                 "(no cubin, math without libdevice)")
endif()
foreach(v STITCH_PTXAS STITCH_LIBDEVICE STITCH_NVJITLINK_LIBRARY STITCH_NVJITLINK_INCLUDE
          STITCH_CUDA_DRIVER_INCLUDE STITCH_NVDISASM)
  if(NOT ${v})
    set(${v} "")
  endif()
endforeach()
