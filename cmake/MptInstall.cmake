# cmake/MptInstall.cmake: a relocatable package: find_package(mptrain) + target_link_libraries(app mptrain::mptrain).
include(CMakePackageConfigHelpers)

install(TARGETS mptrain mptrain_kernels EXPORT mptrainTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mpt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Kernel headers the public API includes (scalar types, math functors), under include/mptrain/kernels.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/kernels DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mptrain
        FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
install(EXPORT mptrainTargets NAMESPACE mptrain:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mptrain)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mptrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mptrainConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mptrain)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mptrainConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mptrainConfig.cmake ${PROJECT_BINARY_DIR}/mptrainConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindSentencePiece.cmake ${PROJECT_SOURCE_DIR}/cmake/FindPCRE2.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mptrain)
