# libwinnow_llvm.so: the LLVM backend (compiler/backend/llvm/), a module that
# make_llvm_backend() opens with dlopen when the llvm backend is asked for, so libwinnow,
# the tool and the tests neither link LLVM nor need its shared libraries to start.
set(WINNOW_LLVM_BUILT OFF)
if(NOT WINNOW_LLVM STREQUAL "OFF")
  # LLVM's version file takes "19.1" (major.minor), not "19": ask for none, check the major.
  find_package(LLVM CONFIG QUIET HINTS /usr/lib/llvm-19/lib/cmake/llvm)
  if(LLVM_FOUND AND NOT LLVM_VERSION_MAJOR EQUAL 19)
    message(STATUS "winnow: LLVM ${LLVM_PACKAGE_VERSION} found, the LLVM backend needs 19")
    set(LLVM_FOUND OFF)
  endif()
  if(LLVM_FOUND)
    find_package(Clang CONFIG QUIET HINTS ${LLVM_DIR}/../clang /usr/lib/llvm-19/lib/cmake/clang)
  endif()
  find_library(WINNOW_NVJITLINK_LIB nvJitLink HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_program(WINNOW_CLANG_EXECUTABLE clang-${LLVM_VERSION_MAJOR} clang
               HINTS ${LLVM_TOOLS_BINARY_DIR} NO_DEFAULT_PATH)
  if(LLVM_FOUND AND Clang_FOUND AND TARGET clang-cpp AND WINNOW_NVJITLINK_LIB
     AND WINNOW_CLANG_EXECUTABLE)
    set(WINNOW_LLVM_BUILT ON)
  elseif(WINNOW_LLVM STREQUAL "ON")
    message(FATAL_ERROR "WINNOW_LLVM=ON needs LLVM 19, clang 19's libclang-cpp and nvJitLink "
                        "(scripts/install-deps.sh installs llvm-19-dev, libclang-cpp19-dev, clang-19)")
  endif()
endif()
if(WINNOW_LLVM_BUILT)
  message(STATUS "winnow: LLVM backend ON (LLVM ${LLVM_PACKAGE_VERSION}, ${WINNOW_CLANG_EXECUTABLE})")
else()
  message(STATUS "winnow: LLVM backend OFF (WINNOW_LLVM=${WINNOW_LLVM}): NVRTC only")
endif()

if(WINNOW_LLVM_BUILT)
  get_filename_component(WINNOW_CUDA_PATH ${CUDAToolkit_BIN_DIR} DIRECTORY)
  file(GLOB WINNOW_LLVM_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/compiler/backend/llvm/*.cpp)
  # dump_sources and arch: the two pieces of compiler/backend the module uses, built again
  # into it (its symbols are hidden, as libwinnow's are).
  add_library(winnow_llvm MODULE ${WINNOW_LLVM_SRC}
              ${CMAKE_SOURCE_DIR}/compiler/backend/dump_sources.cpp
              ${CMAKE_SOURCE_DIR}/compiler/backend/arch.cpp)
  set_target_properties(winnow_llvm PROPERTIES PREFIX "lib" OUTPUT_NAME winnow_llvm)
  target_include_directories(winnow_llvm PRIVATE ${CMAKE_SOURCE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  target_include_directories(winnow_llvm SYSTEM PRIVATE ${LLVM_INCLUDE_DIRS} ${CLANG_INCLUDE_DIRS})
  target_compile_definitions(winnow_llvm PRIVATE ${LLVM_DEFINITIONS}
                             WINNOW_CLANG_EXECUTABLE="${WINNOW_CLANG_EXECUTABLE}"
                             WINNOW_CUDA_PATH="${WINNOW_CUDA_PATH}")
  target_link_libraries(winnow_llvm PRIVATE clang-cpp LLVM ${WINNOW_NVJITLINK_LIB} fmt::fmt-header-only)
  target_link_options(winnow_llvm PRIVATE -Wl,--no-undefined)
  install(TARGETS winnow_llvm LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  # The version libwinnow states for the llvm backend without loading it (cache keys): the
  # module's own version() must say the same, or it is refused at its first compile.
  target_compile_definitions(winnow_compiler PRIVATE
    WINNOW_LLVM_VERSION="clang ${LLVM_PACKAGE_VERSION} nvJitLink ${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
endif()
