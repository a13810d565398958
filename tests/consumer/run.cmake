# tests/consumer/run.cmake: install, relocate, then build README's CMake snippet (as printed) with main.cpp and run it.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/staging RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
file(RENAME ${WORK}/staging ${WORK}/relocated)  # the package must not remember where it was installed

# The consumer project is README.md's snippet, byte for byte, so the two cannot drift. It sets no C++ standard:
# the package must carry C++20 itself.
file(READ ${README} readme)
string(REGEX MATCH "<!-- consumer-cmake -->\n```cmake\n(.*)```\n<!-- /consumer-cmake -->" found "${readme}")
if(NOT found)
  message(FATAL_ERROR "no <!-- consumer-cmake --> block in ${README}")
endif()
file(WRITE ${WORK}/src/CMakeLists.txt "${CMAKE_MATCH_1}")
file(COPY ${MAIN} DESTINATION ${WORK}/src)
if(CMAKE_MATCH_1 MATCHES "CXX_STANDARD")
  message(FATAL_ERROR "README's consumer snippet sets the C++ standard; the package must carry it")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK}/src -B ${WORK}/build -G ${GENERATOR}
                        -DCMAKE_PREFIX_PATH=${WORK}/relocated RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${WORK}/build/app RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(rc OR NOT out MATCHES "consumer OK")
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()
