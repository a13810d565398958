# tests/consumer/run.cmake: install, relocate, then build README's CMake snippet (as printed) with main.cpp and run it.
# -DMAIN=file [-DEXPECT=regex (default "consumer OK")] [-DRUNS=n: run it n times in one directory, EXPECT matched
# against the last run] [-DREADME_BLOCK=name: README.md must show MAIN byte for byte between <!-- name --> markers].
if(NOT DEFINED EXPECT)
  set(EXPECT "consumer OK")
endif()
if(NOT DEFINED RUNS)
  set(RUNS 1)
endif()
if(DEFINED README_BLOCK)
  file(READ ${README} readme_text)
  file(READ ${MAIN} main_text)
  string(FIND "${readme_text}" "<!-- ${README_BLOCK} -->\n```cpp\n${main_text}```\n<!-- /${README_BLOCK} -->" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "README.md does not show ${MAIN} as it is between <!-- ${README_BLOCK} --> markers")
  endif()
endif()
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
configure_file(${MAIN} ${WORK}/src/main.cpp COPYONLY)  # the snippet builds main.cpp
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
foreach(run RANGE 1 ${RUNS})
  execute_process(COMMAND ${WORK}/build/app WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message(STATUS "run ${run}: ${out}${err}")
  if(rc)
    message(FATAL_ERROR "the consumer failed (run ${run}): ${rc}")
  endif()
endforeach()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the consumer's last run does not match '${EXPECT}'")
endif()
