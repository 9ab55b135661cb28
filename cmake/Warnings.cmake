# Warnings for the project's own targets: call stitch_warnings(target).
function(stitch_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(STITCH_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
