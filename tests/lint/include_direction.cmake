# The direction of includes (ctest include_direction): ops/<family>/ files include their own
# family, ops/common/ and the layers below (runtime/, compiler/, include/, templates/);
# ops/common/ includes no family; ops/capi/, the C API over every family, may include any;
# runtime/, compiler/ and templates/ include nothing of ops/. Every ops/ source lives in a
# folder: a family's, common/ or capi/. Fails listing every include that breaks a rule.
#   cmake -DSRC=<source dir> -P tests/lint/include_direction.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT SRC)
  message(FATAL_ERROR "include_direction: pass -DSRC=<the source folder>")
endif()
set(families topk knn paged block shard)
set(errors "")

file(GLOB_RECURSE ops_files RELATIVE ${SRC} ${SRC}/ops/*.h ${SRC}/ops/*.cpp)
foreach(f ${ops_files})
  string(REGEX MATCH "^ops/([^/]+)/" in_folder "${f}")
  set(folder "${CMAKE_MATCH_1}")
  if(NOT in_folder)
    list(APPEND errors
         "${f}: an ops/ source outside a family folder (ops/<family>/, common/, capi/)")
    continue()
  endif()
  if(NOT folder IN_LIST families AND NOT folder STREQUAL "common" AND NOT folder STREQUAL "capi")
    list(APPEND errors
         "${f}: ops/${folder}/ is no known family (tests/lint/include_direction.cmake lists them)")
    continue()
  endif()
  if(folder STREQUAL "capi")
    continue()
  endif()
  file(STRINGS ${SRC}/${f} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"ops/")
  foreach(line ${includes})
    string(REGEX MATCH "\"ops/([^\"]*)\"" _ "${line}")
    set(target "${CMAKE_MATCH_1}")
    string(REGEX MATCH "^([^/]+)/" target_in_folder "${target}")
    set(target_folder "${CMAKE_MATCH_1}")
    if(NOT target_in_folder)
      list(APPEND errors "${f}: includes ops/${target}, which is in no family folder")
    elseif(target_folder STREQUAL folder OR target_folder STREQUAL "common")
      # its own family, or common/
    elseif(folder STREQUAL "common")
      list(APPEND errors "${f}: ops/common/ includes the ${target_folder} family (ops/${target})")
    else()
      string(CONCAT msg "${f}: the ${folder} family includes the ${target_folder} family "
                        "(ops/${target}), which it may reach only through ops/common/")
      list(APPEND errors "${msg}")
    endif()
  endforeach()
endforeach()

file(GLOB_RECURSE lower_files RELATIVE ${SRC} ${SRC}/runtime/*.h ${SRC}/runtime/*.cpp
     ${SRC}/compiler/*.h ${SRC}/compiler/*.cpp ${SRC}/templates/*.cuh)
foreach(f ${lower_files})
  file(STRINGS ${SRC}/${f} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"ops/")
  foreach(line ${includes})
    string(STRIP "${line}" line)
    list(APPEND errors "${f}: a layer below ops/ includes ops/ (${line})")
  endforeach()
endforeach()

list(LENGTH ops_files n_ops)
list(LENGTH lower_files n_lower)
if(n_ops EQUAL 0 OR n_lower EQUAL 0)
  message(FATAL_ERROR
          "include_direction: no sources under ${SRC} (ops/: ${n_ops}, below: ${n_lower})")
endif()
if(errors)
  list(LENGTH errors n)
  string(REPLACE ";" "\n  " text "${errors}")
  message(FATAL_ERROR "include_direction: ${n} include(s) against the direction:\n  ${text}")
endif()
message(STATUS "include_direction: ${n_ops} ops/ files and ${n_lower} below ops/ checked")
