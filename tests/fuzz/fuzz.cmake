# The libFuzzer target over the score-program pipeline (tests/fuzz/fuzz_score.cpp).
# Included by the top-level CMakeLists.txt when WINNOW_FUZZ=ON; needs clang (libFuzzer).
# scripts/fuzz.sh configures build-fuzz/ with clang and builds only this target.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "WINNOW_FUZZ=ON needs clang (libFuzzer), found ${CMAKE_CXX_COMPILER_ID}: "
                      "configure with CC=clang CXX=clang++, or run scripts/fuzz.sh")
endif()

# The compiler's own sources, instrumented (coverage guides the fuzzer, sanitizers check
# it); the NVRTC backend is left out, the fuzz loop never compiles CUDA.
file(GLOB WINNOW_FUZZ_COMPILER_SRC CONFIGURE_DEPENDS
     compiler/ir/*.cpp compiler/codegen/*.cpp compiler/plan/*.cpp)
add_executable(winnow_fuzz_score tests/fuzz/fuzz_score.cpp ${WINNOW_FUZZ_COMPILER_SRC}
               ${WINNOW_EMBEDDED_CPP})
target_include_directories(winnow_fuzz_score PRIVATE ${CMAKE_SOURCE_DIR}
                           ${CMAKE_SOURCE_DIR}/templates)
target_link_libraries(winnow_fuzz_score PRIVATE fmt::fmt-header-only)
set(WINNOW_FUZZ_SANITIZERS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
target_compile_options(winnow_fuzz_score PRIVATE ${WINNOW_FUZZ_SANITIZERS} -fno-omit-frame-pointer)
target_link_options(winnow_fuzz_score PRIVATE ${WINNOW_FUZZ_SANITIZERS})
