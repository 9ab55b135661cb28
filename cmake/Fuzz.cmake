# -DSTITCH_FUZZ=ON (clang only) builds the libFuzzer targets in fuzz/ and nothing else by
# default: every library is compiled with the fuzzer's coverage hooks and ASan/UBSan, so a
# fuzzer finds memory errors and undefined behaviour in the code it drives, not only crashes.
# The daemon, the compiler backends, tests and benchmarks stay out of the default build
# (fuzz/CMakeLists.txt marks their folders EXCLUDE_FROM_ALL): they are not fuzzed, and
# building LLVM-heavy code with sanitizers would cost minutes for nothing.
option(STITCH_FUZZ "Build the libFuzzer targets in fuzz/ (clang only); see scripts/fuzz" OFF)
if(STITCH_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "STITCH_FUZZ needs clang (libFuzzer); configure with "
                        "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  if(STITCH_SANITIZE)
    message(FATAL_ERROR "STITCH_FUZZ sets its own sanitizers; leave STITCH_SANITIZE empty")
  endif()
  # Any UBSan report aborts, so libFuzzer records it as a crash with its input.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  message(STATUS "stitchd: fuzz build (libFuzzer, address, undefined)")
endif()
