# The torch extension libwinnow_torch.so (python/winnow/_ext/torch_ops.cpp): C++ kernels of
# the hot torch ops over the torch stable ABI, linked with libwinnow.so.0 (the C ABI only).
# Included by the top-level CMakeLists.txt (WINNOW_TORCH_EXTENSION) and by the standalone
# project python/winnow/_ext/CMakeLists.txt (dev/build_torch_ext.sh).
#
# winnow_find_torch(<python>): asks that interpreter's torch for its headers and libraries.
# Sets WINNOW_TORCH_FOUND and, when found, WINNOW_TORCH_VERSION, WINNOW_TORCH_INCLUDE_DIRS
# and WINNOW_TORCH_LIBRARY_DIR; WINNOW_TORCH_WHY says why not otherwise. The extension needs
# torch >= 2.11 (its stable-ABI target) built with CUDA (libtorch_cuda.so: the current
# stream).
#
# winnow_add_torch_ext(<target> <libwinnow target>): the shared library <target>
# (libwinnow_torch.so), whose RUNPATH is $ORIGIN (libwinnow.so.0 beside it, as in the
# Python package); torch's libraries are found already loaded, by their SONAME.

# torch 2.11: the stable ABI version the extension is compiled for (TORCH_TARGET_VERSION),
# so a build against a later torch loads into 2.11 too.
set(WINNOW_TORCH_TARGET_VERSION 0x020b000000000000)
set(WINNOW_TORCH_MIN_VERSION 2.11)

function(winnow_find_torch python)
  set(WINNOW_TORCH_FOUND FALSE PARENT_SCOPE)
  if(NOT python)
    set(WINNOW_TORCH_WHY "no Python interpreter" PARENT_SCOPE)
    return()
  endif()
  execute_process(
    COMMAND ${python} -c [=[
import torch, torch.utils.cpp_extension as c
print(torch.__version__.split("+")[0])
print(",".join(c.include_paths()))
print(c.library_paths()[0])
print(1 if torch.version.cuda else 0)
]=]
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    string(STRIP "${err}" err)
    string(REGEX REPLACE ".*\n" "" err "${err}")  # the error's last line
    set(WINNOW_TORCH_WHY "${python} cannot import torch (${err})" PARENT_SCOPE)
    return()
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  list(LENGTH lines n)
  if(n LESS 4)
    set(WINNOW_TORCH_WHY "unexpected answer from ${python}: ${out}" PARENT_SCOPE)
    return()
  endif()
  list(GET lines -4 version)
  list(GET lines -3 includes)
  list(GET lines -2 libdir)
  list(GET lines -1 cuda)
  string(REPLACE "," ";" includes "${includes}")
  if(version VERSION_LESS WINNOW_TORCH_MIN_VERSION)
    set(WINNOW_TORCH_WHY "torch ${version} is older than ${WINNOW_TORCH_MIN_VERSION}" PARENT_SCOPE)
    return()
  endif()
  if(NOT cuda OR NOT EXISTS ${libdir}/libtorch_cuda.so)
    set(WINNOW_TORCH_WHY "torch ${version} is built without CUDA" PARENT_SCOPE)
    return()
  endif()
  set(WINNOW_TORCH_FOUND TRUE PARENT_SCOPE)
  set(WINNOW_TORCH_VERSION ${version} PARENT_SCOPE)
  set(WINNOW_TORCH_INCLUDE_DIRS ${includes} PARENT_SCOPE)
  set(WINNOW_TORCH_LIBRARY_DIR ${libdir} PARENT_SCOPE)
endfunction()

function(winnow_add_torch_ext target winnow_lib)
  set(source ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../python/winnow/_ext/torch_ops.cpp)
  add_library(${target} SHARED ${source})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME winnow_torch PREFIX lib
                        CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                        BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "$ORIGIN")
  # USE_CUDA: the shim's CUDA half (aoti_torch_get_current_cuda_stream).
  target_compile_definitions(${target} PRIVATE USE_CUDA
                             TORCH_TARGET_VERSION=${WINNOW_TORCH_TARGET_VERSION})
  target_include_directories(${target} SYSTEM PRIVATE ${WINNOW_TORCH_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE ${winnow_lib}
                        ${WINNOW_TORCH_LIBRARY_DIR}/libtorch_cpu.so
                        ${WINNOW_TORCH_LIBRARY_DIR}/libtorch_cuda.so)
  target_link_options(${target} PRIVATE -Wl,--no-undefined -Wl,--as-needed)
endfunction()
