# -DSTITCH_SANITIZE=address,undefined builds everything with those sanitizers.
if(STITCH_SANITIZE)
  string(REPLACE "," ";" _stitch_sanitizers "${STITCH_SANITIZE}")
  foreach(s IN LISTS _stitch_sanitizers)
    if(NOT s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "STITCH_SANITIZE: unknown sanitizer '${s}'")
    endif()
  endforeach()
  add_compile_options(-fsanitize=${STITCH_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=${STITCH_SANITIZE})
  if("thread" IN_LIST _stitch_sanitizers AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU"
     AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12)
    # GCC 12 warns that TSan does not model the atomic_thread_fence inside Asio's headers;
    # the warning is about a third-party header, and -Werror would make it fatal.
    add_compile_options(-Wno-tsan)
  endif()
  message(STATUS "stitchd: sanitizers ${STITCH_SANITIZE}")
endif()
