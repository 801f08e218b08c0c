# CTest llvm_static_module: the self-contained llvm backend (-DWINNOW_LLVM_STATIC=ON), no GPU
# needed.
#   cmake -DBUILD=<build dir> -DSRC=<source dir> -DSCRATCH=<scratch dir>
#         -DCUDAToolkit_ROOT=<dir> -DGENERATOR=<generator> -P run.cmake
# 1. A build of libwinnow_llvm.so alone with WINNOW_LLVM_STATIC=ON in SCRATCH; 2. its
# dependencies (readelf -d) name no LLVM or clang library; 3. BUILD's winnow tool, copied
# beside it (the tool loads the module beside itself), compiles a knn kernel to PTX with the
# llvm backend, equal to what the same tool gives with the shared module in BUILD.
foreach(v BUILD SRC SCRATCH GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run.cmake needs -D${v}=...")
  endif()
endforeach()
include(${CMAKE_CURRENT_LIST_DIR}/../cmake_run.cmake)

file(REMOVE_RECURSE ${SCRATCH}/tool ${SCRATCH}/cache-static ${SCRATCH}/cache-shared)
set(cuda_root "")
if(DEFINED CUDAToolkit_ROOT)
  set(cuda_root -DCUDAToolkit_ROOT=${CUDAToolkit_ROOT})
endif()
run(${CMAKE_COMMAND} -S ${SRC} -B ${SCRATCH}/build -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DWINNOW_LLVM=ON -DWINNOW_LLVM_STATIC=ON -DWINNOW_BUILD_TESTS=OFF
    -DWINNOW_TORCH_EXTENSION=OFF ${cuda_root})
run(${CMAKE_COMMAND} --build ${SCRATCH}/build --target winnow_llvm)
set(module ${SCRATCH}/build/libwinnow_llvm.so)

run(readelf -d ${module})
string(REGEX MATCHALL "NEEDED[^\n]*\\[[^]]*\\]" needed "${run_output}")
set(names "")
foreach(n ${needed})
  string(REGEX REPLACE ".*\\[(.*)\\]" "\\1" name "${n}")
  if(name MATCHES "libLLVM|libclang")
    message(FATAL_ERROR "the static module still needs ${name}")
  endif()
  list(APPEND names ${name})
endforeach()
string(REPLACE ";" ", " names "${names}")
message(STATUS "the static module needs: ${names}")

file(MAKE_DIRECTORY ${SCRATCH}/tool)
file(COPY ${BUILD}/winnow ${module} DESTINATION ${SCRATCH}/tool)
set(args compile --score l2 --heads 1 --dim 128 --q-dtype fp16 --k-dtype fp16 --k 64
         --arch sm_90a --emit ptx --backend llvm)
foreach(which static shared)
  set(tool ${SCRATCH}/tool/winnow)
  if(which STREQUAL shared)
    set(tool ${BUILD}/winnow)
  endif()
  run(${CMAKE_COMMAND} -E env WINNOW_CACHE_DIR=${SCRATCH}/cache-${which} WINNOW_NVRTC_OPTIONS=
      ${tool} ${args} -o ${SCRATCH}/${which}.ptx)
  file(READ ${SCRATCH}/${which}.ptx ${which}_ptx)
endforeach()
if(NOT static_ptx MATCHES "\\.entry winnow_knn_stream")
  message(FATAL_ERROR "the static module's PTX has no winnow_knn_stream entry")
endif()
if(NOT static_ptx STREQUAL shared_ptx)
  message(FATAL_ERROR "the static and the shared module give different PTX "
                      "(${SCRATCH}/static.ptx, ${SCRATCH}/shared.ptx)")
endif()
string(LENGTH "${static_ptx}" n)
message(STATUS "the static module's PTX (${n} bytes) equals the shared module's")
