# libwinnow_llvm.so: the LLVM backend (compiler/backend/llvm/), a module that
# make_llvm_backend() opens with dlopen when the llvm backend is asked for, so libwinnow,
# the tool and the tests neither link LLVM nor need its shared libraries to start.
# WINNOW_LLVM_STATIC=ON links it against LLVM's and clang's static libraries (Debian's
# llvm-19-dev and libclang-19-dev ship them) instead of libLLVM and libclang-cpp: one
# self-contained file (about 75 MB; it needs only libz, libzstd and nvJitLink) for a machine
# or a wheel without LLVM. Either way clang's CUDA headers are embedded in it.
option(WINNOW_LLVM_STATIC "Link libwinnow_llvm.so against LLVM's and clang's static libraries" OFF)
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
  if(LLVM_FOUND AND Clang_FOUND AND WINNOW_NVJITLINK_LIB
     AND (TARGET clang-cpp OR WINNOW_LLVM_STATIC)
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
  list(FILTER WINNOW_LLVM_SRC EXCLUDE REGEX "/polly_stub\\.cpp$")
  # clang's CUDA headers from the resource folder of the clang it is built with: the wrapper
  # headers and the builtin C headers they reach (compiler/backend/llvm/clang_headers.h).
  execute_process(COMMAND ${WINNOW_CLANG_EXECUTABLE} -print-resource-dir
                  OUTPUT_VARIABLE WINNOW_CLANG_RESOURCE_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(WINNOW_CLANG_HEADERS_CPP ${CMAKE_BINARY_DIR}/generated/clang_cuda_headers.cpp)
  set(globs "__clang_cuda_*.h,__stddef_*.h,__stdarg_*.h,cuda_wrappers/*,stddef.h,stdint.h,stdarg.h,limits.h,float.h,inttypes.h,stdbool.h,stdalign.h,iso646.h,stdnoreturn.h")
  add_custom_command(
    OUTPUT ${WINNOW_CLANG_HEADERS_CPP}
    COMMAND ${CMAKE_COMMAND} -DOUT=${WINNOW_CLANG_HEADERS_CPP} -DDIR=${WINNOW_CLANG_RESOURCE_DIR}/include
            "-DGLOBS=${globs}" -DPREFIX= -DHEADER=compiler/backend/llvm/clang_headers.h
            -DNAMESPACE=winnow::backend::llvm_be -DFUNCTION=clang_cuda_headers
            -P ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    DEPENDS ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    COMMENT "Embedding clang's CUDA headers" VERBATIM)
  # dump_sources and arch: the two pieces of compiler/backend the module uses, built again
  # into it (its symbols are hidden, as libwinnow's are).
  add_library(winnow_llvm MODULE ${WINNOW_LLVM_SRC} ${WINNOW_CLANG_HEADERS_CPP}
              ${CMAKE_SOURCE_DIR}/compiler/backend/dump_sources.cpp
              ${CMAKE_SOURCE_DIR}/compiler/backend/arch.cpp)
  set_target_properties(winnow_llvm PROPERTIES PREFIX "lib" OUTPUT_NAME winnow_llvm)
  target_include_directories(winnow_llvm PRIVATE ${CMAKE_SOURCE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  target_include_directories(winnow_llvm SYSTEM PRIVATE ${LLVM_INCLUDE_DIRS} ${CLANG_INCLUDE_DIRS})
  target_compile_definitions(winnow_llvm PRIVATE ${LLVM_DEFINITIONS}
                             WINNOW_CLANG_EXECUTABLE="${WINNOW_CLANG_EXECUTABLE}"
                             WINNOW_CUDA_PATH="${WINNOW_CUDA_PATH}")
  if(WINNOW_LLVM_STATIC)
    # The NVPTX target and what clang's CUDA front end and LLVM's -O3 pipeline use; unused
    # sections dropped, LLVM's symbols kept inside (another LLVM in the process, e.g.
    # Triton's, never sees them).
    llvm_map_components_to_libnames(winnow_llvm_components NVPTX codegen passes ipo irreader
      bitwriter option mc target frontendopenmp frontendhlsl frontenddriver windowsdriver
      coverage lto)
    # LLVMSupport's link interface names zstd::libzstd_shared, which LLVM's CMake files
    # leave to a zstd CMake package that Debian's libzstd1 does not ship: the library itself.
    if(NOT TARGET zstd::libzstd_shared)
      find_library(WINNOW_ZSTD_LIB NAMES zstd libzstd.so.1 REQUIRED)
      add_library(zstd::libzstd_shared SHARED IMPORTED)
      set_target_properties(zstd::libzstd_shared PROPERTIES IMPORTED_LOCATION ${WINNOW_ZSTD_LIB})
    endif()
    # Debian's LLVM links Polly into its tools (LLVMExtensions names it) but ships no static
    # Polly: without it, clang's reference to the plugin's entry is met by a stub.
    if(TARGET LLVMExtensions AND NOT EXISTS ${LLVM_LIBRARY_DIR}/libPolly.a)
      set_property(TARGET LLVMExtensions PROPERTY INTERFACE_LINK_LIBRARIES LLVMSupport)
      target_sources(winnow_llvm PRIVATE ${CMAKE_SOURCE_DIR}/compiler/backend/llvm/polly_stub.cpp)
    endif()
    # clang's archives by file: Debian's imported clang targets link libLLVM.so.
    file(GLOB winnow_clang_archives ${LLVM_LIBRARY_DIR}/libclang[A-Z]*.a)
    if(NOT winnow_clang_archives)
      message(FATAL_ERROR "WINNOW_LLVM_STATIC=ON needs clang's static libraries in ${LLVM_LIBRARY_DIR} (libclang-19-dev)")
    endif()
    target_link_libraries(winnow_llvm PRIVATE -Wl,--start-group ${winnow_clang_archives} -Wl,--end-group
                          ${winnow_llvm_components})
    target_link_options(winnow_llvm PRIVATE -Wl,--gc-sections -Wl,--exclude-libs,ALL -Wl,--as-needed)
  else()
    target_link_libraries(winnow_llvm PRIVATE clang-cpp LLVM)
  endif()
  target_link_libraries(winnow_llvm PRIVATE ${WINNOW_NVJITLINK_LIB} fmt::fmt-header-only)
  target_link_options(winnow_llvm PRIVATE -Wl,--no-undefined)
  install(TARGETS winnow_llvm LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  # The version libwinnow states for the llvm backend without loading it (cache keys): the
  # module's own version() must say the same, or it is refused at its first compile.
  target_compile_definitions(winnow_compiler PRIVATE
    WINNOW_LLVM_VERSION="clang ${LLVM_PACKAGE_VERSION} nvJitLink ${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
endif()
