# cmake/CompilerFingerprint.cmake on sources of its own: the fingerprint is 12 hex digits,
# the same for the same bytes whatever order the list gives them in, and different when a
# byte of a source or a file's path changes; the header is left untouched when nothing did.
#
#   cmake -DSCRIPT=<CompilerFingerprint.cmake> -DWORK=<empty scratch dir> -P this file
foreach(var SCRIPT WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compiler_fingerprint_test: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/src/sub")

function(fingerprint list out_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK}/src -DLIST=${list}
                          -DOUT=${WORK}/fingerprint.h -P ${SCRIPT}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the fingerprint script failed (${rc}): ${err}")
  endif()
  file(READ "${WORK}/fingerprint.h" header)
  if(NOT header MATCHES "#define STITCH_COMPILER_FINGERPRINT \"([0-9a-f]+)\"")
    message(FATAL_ERROR "no fingerprint in the header:\n${header}")
  endif()
  string(LENGTH "${CMAKE_MATCH_1}" length)
  if(NOT length EQUAL 12)
    message(FATAL_ERROR "fingerprint ${CMAKE_MATCH_1} has ${length} digits, not 12")
  endif()
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

file(WRITE "${WORK}/src/a.cc" "int a() { return 1; }\n")
file(WRITE "${WORK}/src/sub/b.h" "int b();\n")
file(WRITE "${WORK}/list.txt" "${WORK}/src/a.cc\n${WORK}/src/sub/b.h\n")
file(WRITE "${WORK}/reversed.txt" "${WORK}/src/sub/b.h\n${WORK}/src/a.cc\n")
fingerprint("${WORK}/list.txt" first)
file(TIMESTAMP "${WORK}/fingerprint.h" written "%s")

fingerprint("${WORK}/reversed.txt" reordered)
if(NOT reordered STREQUAL first)
  message(FATAL_ERROR "the list's order changed the fingerprint: ${first} vs ${reordered}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1.1)
fingerprint("${WORK}/list.txt" again)
file(TIMESTAMP "${WORK}/fingerprint.h" rewritten "%s")
if(NOT again STREQUAL first OR NOT rewritten STREQUAL written)
  message(FATAL_ERROR "unchanged sources rewrote the header (${first} at ${written}, "
                      "${again} at ${rewritten})")
endif()

file(WRITE "${WORK}/src/a.cc" "int a() { return 2; }\n")
fingerprint("${WORK}/list.txt" edited)
if(edited STREQUAL first)
  message(FATAL_ERROR "editing a source left the fingerprint at ${first}")
endif()

file(WRITE "${WORK}/src/a.cc" "int a() { return 1; }\n")
file(RENAME "${WORK}/src/sub/b.h" "${WORK}/src/b.h")
file(WRITE "${WORK}/moved.txt" "${WORK}/src/a.cc\n${WORK}/src/b.h\n")
fingerprint("${WORK}/moved.txt" moved)
if(moved STREQUAL first)
  message(FATAL_ERROR "moving a source left the fingerprint at ${first}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK}/src -DLIST=${WORK}/list.txt
                        -DOUT=${WORK}/fingerprint.h -P ${SCRIPT}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "does not exist")
  message(FATAL_ERROR "a listed source that is gone did not fail with its path: ${rc} ${err}")
endif()
message(STATUS "compiler fingerprint: ${first}, ${edited} after an edit, ${moved} after a move")
