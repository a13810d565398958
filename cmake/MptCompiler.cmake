# cmake/MptCompiler.cmake: warnings, ccache and sanitizers for host code.
find_program(MPT_CCACHE ccache)
if(MPT_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${MPT_CCACHE})
endif()

# Warnings for our own targets (a function, not an INTERFACE target, so nothing leaks into the export set).
function(mpt_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()

if(MPT_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=address,undefined)
endif()
