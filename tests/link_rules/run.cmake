# SPDX-License-Identifier: Apache-2.0
# The ctest link_rules_check: configures fixture/ (no compiler, about a
# second) twice and checks what the link check of cmake/SluiceLayers.cmake
# says. Run with cmake -DSLUICE_SOURCE_DIR=<repository> -DWORK_DIR=<scratch>
# -DGENERATOR=<generator> -P run.cmake.
foreach(variable SLUICE_SOURCE_DIR WORK_DIR GENERATOR)
  if(NOT ${variable})
    message(FATAL_ERROR "run.cmake needs -D${variable}=...")
  endif()
endforeach()

# configure(<case> <rc> <output>): configures the fixture afresh; <output> is
# what cmake printed, with line breaks and runs of spaces as one space
# (CMake wraps the text of a message).
function(configure case rc output)
  set(binary ${WORK_DIR}/${case})
  file(REMOVE_RECURSE ${binary})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/fixture -B ${binary}
      -G ${GENERATOR} -DSLUICE_SOURCE_DIR=${SLUICE_SOURCE_DIR} -DCASE=${case}
    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \n]+" " " text "${out}${err}")
  set(${rc} ${result} PARENT_SCOPE)
  set(${output} "${text}" PARENT_SCOPE)
endfunction()

set(failures "")
# expect(<output> <text>...): each <text> is in <output>.
macro(expect output)
  foreach(text ${ARGN})
    string(FIND "${${output}}" "${text}" at)
    if(at EQUAL -1)
      list(APPEND failures "expected: ${text}")
    endif()
  endforeach()
endmacro()
# expect_not(<output> <text>...): no <text> is in <output>.
macro(expect_not output)
  foreach(text ${ARGN})
    string(FIND "${${output}}" "${text}" at)
    if(NOT at EQUAL -1)
      list(APPEND failures "not expected: ${text}")
    endif()
  endforeach()
endmacro()

configure(bad rc output)
if(rc EQUAL 0)
  list(APPEND failures "configure with bad links succeeded")
endif()
expect(output
  # Every problem, and no other: the allowed links and the excused one are
  # not among them.
  "Link rules (cmake/SluiceLayers.cmake): 6 problem(s) in the links of 7 targets"
  "fixture_core (layer core, .) links fixture_rpc (layer rpc, .) rule: core may link core, enums (externals: abseil)"
  "fixture_core (layer core, .) links spdlog::spdlog (external spdlog) rule: core may link core, enums (externals: abseil)"
  "fixture_policy (layer policy, .) links fixture_testing (layer test, .) rule: policy may link policy, core, wire, proto, base (externals:"
  "fixture_rpc (layer rpc, .) links Unlisted::library (in no external library of the table (sluice_external))"
  "fixture_nowhere (.) has no layer"
  "sluice_link_exception(fixture_rpc fixture_core) is no longer needed")
expect_not(output "links fixture_policy" "links absl::strings"
  "fixture_tool (layer")

configure(good rc output)
if(NOT rc EQUAL 0)
  list(APPEND failures "configure with allowed links failed")
endif()
expect(output
  "Link rules: known exception fixture_tool -> fixture_rpc: the fixture's excused link"
  "Link rules: the links of 6 targets follow the layer table (1 known exceptions)")

if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "link_rules_check:\n  ${text}\nThe configure output:\n${output}")
endif()
message(STATUS "link_rules_check: the check reports every bad link and passes the good ones")
