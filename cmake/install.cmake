# `cmake --install`: include/winnow.h, libwinnow.so.0 and libwinnow.a, the CMake package
# (winnowConfig.cmake, winnowConfigVersion.cmake, targets winnow::winnow and
# winnow::winnow_static) and winnow.pc. Included by the top-level CMakeLists.txt.
include(CMakePackageConfigHelpers)
set(WINNOW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/winnow)

install(FILES ${CMAKE_SOURCE_DIR}/include/winnow.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS winnow winnow_static EXPORT winnowTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT winnowTargets NAMESPACE winnow:: DESTINATION ${WINNOW_CMAKE_DIR})

configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/winnowConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/winnowConfig.cmake
                              INSTALL_DESTINATION ${WINNOW_CMAKE_DIR})
# 0.x: minor versions may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/winnowConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/winnowConfig.cmake ${CMAKE_BINARY_DIR}/winnowConfigVersion.cmake
        DESTINATION ${WINNOW_CMAKE_DIR})

# winnow.pc finds its prefix from its own folder, so the installed tree can move.
file(RELATIVE_PATH WINNOW_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" WINNOW_PC_TO_PREFIX "${WINNOW_PC_TO_PREFIX}")
list(TRANSFORM CUDAToolkit_INCLUDE_DIRS PREPEND -I OUTPUT_VARIABLE WINNOW_PC_CUDA_CFLAGS)
list(JOIN WINNOW_PC_CUDA_CFLAGS " " WINNOW_PC_CUDA_CFLAGS)
get_filename_component(WINNOW_NVRTC_DIR ${WINNOW_NVRTC_LIB} DIRECTORY)
configure_file(${CMAKE_SOURCE_DIR}/cmake/winnow.pc.in ${CMAKE_BINARY_DIR}/winnow.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/winnow.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# pip install . (scikit-build-core, pyproject.toml): the Python package's copy of the shared
# library, as the file the loader names (python/winnow/_capi.py), in component `python`.
# pip builds the target winnow_python: `--target winnow` would name the tool's executable
# (also called winnow) in Ninja.
if(WINNOW_PYTHON)
  add_custom_target(winnow_python)
  add_dependencies(winnow_python winnow)
  install(FILES $<TARGET_FILE:winnow> DESTINATION winnow RENAME libwinnow.so.0 COMPONENT python)
  # The torch extension, when built (cmake/torch_ext.cmake), beside it: its RUNPATH $ORIGIN
  # finds that libwinnow.so.0, and python/winnow/_fast_ops.py looks for it there.
  if(TARGET winnow_torch)
    add_dependencies(winnow_python winnow_torch)
    install(TARGETS winnow_torch LIBRARY DESTINATION winnow COMPONENT python)
  endif()
endif()
