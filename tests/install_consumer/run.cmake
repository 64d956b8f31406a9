# SPDX-License-Identifier: Apache-2.0
# Installs a Sluice build into a fresh prefix, then configures, builds and
# runs the consumer project against it.
#   cmake -DBUILD_DIR=<sluice build> -DWORK_DIR=<scratch>
#         -DCXX=<compiler> [-DBUILD_TYPE=<type>] -P run.cmake
foreach(var BUILD_DIR WORK_DIR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR} -B ${WORK_DIR}/build
  -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
  -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)

# The package must come from the prefix, not from the build tree.
file(STRINGS ${WORK_DIR}/build/CMakeCache.txt found
  REGEX "^sluice_client_DIR:PATH=")
string(REPLACE "sluice_client_DIR:PATH=" "" found "${found}")
string(FIND "${found}" "${prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "sluice_client found in ${found}, not under ${prefix}")
endif()

run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
