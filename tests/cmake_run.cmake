# run(COMMAND...): runs a command from a cmake -P test script; a non-zero status fails the
# script with the command and its output; the output is left in run_output.
# Included by tests/install/run.cmake and tests/llvm_static/run.cmake.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGV}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()
