# CTest install_consumers: what a user of an installed winnow does, with no GPU needed.
#   cmake -DBUILD=<build dir> -DSRC=<source dir> -DPREFIX=<scratch prefix>
#         -DCUDAToolkit_ROOT=<dir> -DGENERATOR=<generator> -DCC=<C compiler> -P run.cmake
# 1. cmake --install into PREFIX; 2. `nm -D --defined-only libwinnow.so` lists winnow*
# names only; 3. tests/install/ configured with find_package(winnow CONFIG), built, both
# programs run; 4. consumer.c built with `pkg-config --cflags --libs winnow` and run;
# 5. the same, statically, with `pkg-config --static --libs winnow`.
foreach(v BUILD SRC PREFIX GENERATOR CC)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run.cmake needs -D${v}=...")
  endif()
endforeach()

include(${CMAKE_CURRENT_LIST_DIR}/../cmake_run.cmake)

file(REMOVE_RECURSE ${PREFIX})
run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${PREFIX}/usr)
file(GLOB_RECURSE so ${PREFIX}/usr/*/libwinnow.so)
list(LENGTH so n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one installed libwinnow.so, found: ${so}")
endif()
get_filename_component(libdir ${so} DIRECTORY)
foreach(f ${PREFIX}/usr/include/winnow.h ${libdir}/libwinnow.a ${libdir}/libwinnow.so.0
          ${libdir}/pkgconfig/winnow.pc ${libdir}/cmake/winnow/winnowConfig.cmake
          ${libdir}/cmake/winnow/winnowConfigVersion.cmake)
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
message(STATUS "installed into ${PREFIX}/usr (libraries in ${libdir})")

# 2. Exports: the C API only (no libcrypto, fmt or C++ names).
run(nm -D --defined-only ${so})
string(REGEX MATCHALL "[^\n]+" lines "${run_output}")
set(exported 0)
set(bad "")
foreach(line ${lines})
  string(REGEX REPLACE "^.* " "" name "${line}")
  if(name MATCHES "^winnow")
    math(EXPR exported "${exported} + 1")
  else()
    string(APPEND bad "  ${line}\n")
  endif()
endforeach()
if(NOT bad STREQUAL "" OR exported EQUAL 0)
  message(FATAL_ERROR "libwinnow.so exports ${exported} winnow* names and these others:\n${bad}")
endif()
message(STATUS "nm -D --defined-only libwinnow.so: ${exported} symbols, all winnow*")
run(readelf -d ${so})
if(NOT run_output MATCHES "SONAME[^\n]*libwinnow\\.so\\.0\\]")
  message(FATAL_ERROR "libwinnow.so has no SONAME libwinnow.so.0:\n${run_output}")
endif()

# 3. find_package(winnow CONFIG): winnow::winnow and winnow::winnow_static.
set(consumer ${PREFIX}/consumer-cmake)
set(cuda_root "")
if(CUDAToolkit_ROOT)
  set(cuda_root -DCUDAToolkit_ROOT=${CUDAToolkit_ROOT})
endif()
run(${CMAKE_COMMAND} -S ${SRC}/tests/install -B ${consumer} -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${PREFIX}/usr ${cuda_root})
run(${CMAKE_COMMAND} --build ${consumer})
set(ENV{WINNOW_DISABLE_DISK_CACHE} 1)
foreach(exe consumer_shared consumer_static)
  run(${consumer}/${exe})
  message(STATUS "${exe}: ${run_output}")
endforeach()
# The shared one really uses the installed library.
run(ldd ${consumer}/consumer_shared)
if(NOT run_output MATCHES "libwinnow\\.so\\.0 => ${libdir}/libwinnow\\.so\\.0")
  message(FATAL_ERROR "consumer_shared does not load ${libdir}/libwinnow.so.0:\n${run_output}")
endif()

# 4. pkg-config: the plain C compiler, the flags from winnow.pc.
set(ENV{PKG_CONFIG_PATH} ${libdir}/pkgconfig)
run(pkg-config --cflags --libs winnow)
string(STRIP "${run_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CC} -std=c99 -Wall -Werror -o ${PREFIX}/consumer_pc ${SRC}/tests/install/consumer.c ${flags})
set(ENV{LD_LIBRARY_PATH} ${libdir})
run(${PREFIX}/consumer_pc)
message(STATUS "consumer_pc (pkg-config --cflags --libs winnow): ${run_output}")

# 5. pkg-config --static: what libwinnow.a needs besides (Libs.private), the archive named
# explicitly (-l:libwinnow.a) since -lwinnow picks the shared library.
run(pkg-config --static --libs winnow)
string(STRIP "${run_output}" flags)
string(REPLACE "-lwinnow " "-l:libwinnow.a " flags "${flags} ")
separate_arguments(flags UNIX_COMMAND "${flags}")
run(pkg-config --cflags winnow)
string(STRIP "${run_output}" cflags)
separate_arguments(cflags UNIX_COMMAND "${cflags}")
run(${CC} -std=c99 -Wall -Werror -o ${PREFIX}/consumer_pc_static ${SRC}/tests/install/consumer.c
    ${cflags} ${flags})
unset(ENV{LD_LIBRARY_PATH})
run(${PREFIX}/consumer_pc_static)
message(STATUS "consumer_pc_static (pkg-config --static, -l:libwinnow.a): ${run_output}")
