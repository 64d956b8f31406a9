# SPDX-License-Identifier: Apache-2.0
# How tests are registered, so that CTest can run them side by side and the
# sanitizer builds compile only what their tests need.
#
# Every test is one of two kinds, by its CTest label:
#   unit         deterministic and hermetic: a fake clock, port 0, no other
#                process. Any number run at once. The sanitizer builds of CI
#                build only the target sluice_unit_tests (the unit test
#                binaries and what they link) and run `ctest -L unit`.
#   integration  real processes (sluiced, redis-server, nginx, ...) in real
#                time. They run side by side too (scripts/test runs ctest
#                with -j), except where a test says why it cannot: a test
#                that measures time, rates or latencies on a machine that
#                neighbours keep busy takes RUN_SERIAL or a RESOURCE_LOCK,
#                each with a one-line reason, which CTest shows as the
#                test's SLUICE_SCHEDULING_REASON property in the
#                generated CTest files.
#
# sluice_gtest(<target> UNIT|INTEGRATION [<option>...])
#   Registers each GoogleTest case of <target> as its own CTest test
#   (gtest_discover_tests) and adds <target> to sluice_unit_tests or
#   sluice_integration_tests.
# sluice_test(<name> UNIT|INTEGRATION COMMAND <command>... [<option>...])
#   add_test for a test that is not a GoogleTest binary (a script).
#
# Options:
#   TIMEOUT <s>          CTest's timeout (default: 60 unit, 120 integration)
#   COST <s>             roughly how long the test (each case of a binary)
#                        takes: CTest starts the costly ones first, so that
#                        a long test does not start last and run alone
#   PROCESSORS <n>       how many of ctest's -j slots it takes while it runs:
#                        its share of the machine, in quarters of a core
#                        (scripts/test runs ctest with 4 slots per core).
#                        Default 4 for a unit test (it computes all the
#                        while), 1 for an integration test (it mostly
#                        waits: on real time, ticks, other processes). A
#                        test that measures latency or rates takes more
#                        than it uses, so that its neighbours leave it the
#                        headroom its measurement assumes.
#   RUN_SERIAL <reason>  nothing else runs beside it
#   RESOURCE_LOCK <lock> <reason>
#                        no other test holding <lock> runs beside it
#   TEST_PREFIX <p>      (sluice_gtest) prefix of the test names
#   ENVIRONMENT <v>...   (sluice_test) NAME=VALUE for the command
#   DEPENDS <target>...  (sluice_test) programs the command starts, built
#                        by sluice_unit_tests or sluice_integration_tests
#                        (those this build has; the program of COMMAND is
#                        one without saying so)

add_custom_target(sluice_unit_tests)
add_custom_target(sluice_integration_tests)

# Parses the options of sluice_gtest or sluice_test into arg_* in the
# caller's scope, and `out`: the test properties, as a list for
# set_tests_properties or gtest_discover_tests(PROPERTIES ...).
macro(_sluice_parse_test_options out kind)
  cmake_parse_arguments(PARSE_ARGV 2 arg ""
    "TIMEOUT;COST;PROCESSORS;RUN_SERIAL;TEST_PREFIX"
    "RESOURCE_LOCK;COMMAND;ENVIRONMENT;DEPENDS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
      "sluice tests: unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if("${kind}" STREQUAL "UNIT")
    set(_label unit)
    set(_timeout 60)
    set(_processors 4)
  elseif("${kind}" STREQUAL "INTEGRATION")
    set(_label integration)
    set(_timeout 120)
    set(_processors 1)
  else()
    message(FATAL_ERROR
      "sluice tests: the kind is UNIT or INTEGRATION, got '${kind}'")
  endif()
  foreach(_option TIMEOUT PROCESSORS)
    string(TOLOWER "_${_option}" _default)
    if(arg_${_option})
      set(${_default} ${arg_${_option}})
    endif()
  endforeach()
  set(${out} LABELS ${_label} TIMEOUT ${_timeout} PROCESSORS ${_processors})
  if(arg_COST)
    list(APPEND ${out} COST ${arg_COST})
  endif()
  set(_reasons "")
  if(arg_RUN_SERIAL)
    list(APPEND ${out} RUN_SERIAL TRUE)
    set(_reasons "serial: ${arg_RUN_SERIAL}")
  endif()
  if(arg_RESOURCE_LOCK)
    list(LENGTH arg_RESOURCE_LOCK _n)
    if(NOT _n EQUAL 2)
      message(FATAL_ERROR
        "sluice tests: RESOURCE_LOCK takes a lock and a reason")
    endif()
    list(GET arg_RESOURCE_LOCK 0 _lock)
    list(GET arg_RESOURCE_LOCK 1 _reason)
    list(APPEND ${out} RESOURCE_LOCK ${_lock})
    if(_reasons)
      string(APPEND _reasons " / ")
    endif()
    string(APPEND _reasons "lock ${_lock}: ${_reason}")
  endif()
  if(_reasons)
    # A list separator would split the value.
    string(REPLACE ";" "," _reasons "${_reasons}")
    list(APPEND ${out} SLUICE_SCHEDULING_REASON "${_reasons}")
  endif()
endmacro()

function(sluice_gtest target kind)
  _sluice_parse_test_options(props ${kind})
  if(arg_COMMAND OR arg_ENVIRONMENT OR arg_DEPENDS)
    message(FATAL_ERROR
      "sluice_gtest(${target}): no COMMAND, ENVIRONMENT or DEPENDS")
  endif()
  set(prefix_args "")
  if(arg_TEST_PREFIX)
    set(prefix_args TEST_PREFIX ${arg_TEST_PREFIX})
  endif()
  gtest_discover_tests(${target} DISCOVERY_TIMEOUT 60 ${prefix_args}
    PROPERTIES ${props})
  add_dependencies(sluice_${_label}_tests ${target})
endfunction()

function(sluice_test name kind)
  _sluice_parse_test_options(props ${kind})
  if(NOT arg_COMMAND)
    message(FATAL_ERROR "sluice_test(${name}): COMMAND is required")
  endif()
  if(arg_TEST_PREFIX)
    message(FATAL_ERROR "sluice_test(${name}): no TEST_PREFIX")
  endif()
  add_test(NAME ${name} COMMAND ${arg_COMMAND})
  set_tests_properties(${name} PROPERTIES ${props})
  if(arg_ENVIRONMENT)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${arg_ENVIRONMENT}")
  endif()
  # What the test runs is built with the rest of its kind: the program of
  # COMMAND when it is one of ours, and the DEPENDS that exist here.
  list(GET arg_COMMAND 0 _program)
  foreach(_needed ${_program} ${arg_DEPENDS})
    if(TARGET ${_needed})
      add_dependencies(sluice_${_label}_tests ${_needed})
    endif()
  endforeach()
endfunction()
