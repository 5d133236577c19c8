# Installation and packaging:
#   cmake --install build --prefix P   the distmm program, the public headers, libdistmm.a,
#                                      libdistmm_program.a (the program as a library) and an
#                                      exported CMake package: find_package(distmm) then
#                                      target_link_libraries(... distmm::distmm) (or
#                                      distmm::program, to run the program's commands)
#   cpack (in build/)                  distmm_<version>_amd64.deb, its run-time dependencies
#                                      computed from the program's shared libraries
include(CMakePackageConfigHelpers)
set(DISTMM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/distmm)

set_target_properties(distmm_armadillo PROPERTIES EXPORT_NAME armadillo)
install(TARGETS distmm distmm_program distmm_armadillo EXPORT distmmTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS distmm_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/distmm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT distmmTargets NAMESPACE distmm:: DESTINATION ${DISTMM_CMAKE_DIR})
configure_package_config_file(cmake/distmmConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/distmmConfig.cmake
                              INSTALL_DESTINATION ${DISTMM_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/distmmConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/distmmConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/distmmConfigVersion.cmake
        DESTINATION ${DISTMM_CMAKE_DIR})
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The user guide the README links to, beside it as in the tree.
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md" PATTERN "*.json")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME distmm)
set(CPACK_PACKAGE_VENDOR "distmm developers")
set(CPACK_PACKAGE_CONTACT "distmm developers <distmm@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "distributed C = A @ B by DP, FSDP and FSDP with overlap, on MPI or an in-process simulator")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # distmm_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# Run-time libraries from dpkg-shlibdeps (Open MPI, Boost.MPI, OpenBLAS, libstdc++); mpirun
# itself; and what building against the installed CMake package needs.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "openmpi-bin")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "libopenmpi-dev, libboost-mpi-dev, libarmadillo-dev, libopenblas-dev, zlib1g-dev, nlohmann-json3-dev, cmake, g++")
include(CPack)
