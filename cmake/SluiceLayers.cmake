# SPDX-License-Identifier: Apache-2.0
# The layering rules of Sluice, and the functions that make the build enforce
# them.
#
# Layers (an arrow points at what a layer may include and link):
#
#   server/core      the pure decision core: absl and the C++ library only,
#                    and sluice_enum_lists (wire/enums: macro lists of the
#                    sluice.v1 enums, a header that includes nothing).
#                    No proto, gRPC, Redis (hiredis), spdlog, yaml-cpp or
#                    prometheus, so that it builds without gRPC and runs
#                    under TSan.
#   server/files     sluice_files: the safe file reader and the atomic
#                    replace; absl only, so every layer above core may
#                    link it.
#   server/policy    -> core, files, proto (sluice_proto); yaml-cpp
#                    privately.
#   server/cluster   -> policy, core; the only code that knows Redis.
#   server/rpc       sluice_rpc   -> core, proto, gRPC (thin handlers).
#                    sluice_admin -> rpc, policy, core, proto, gRPC.
#   server/tree      sluice_tree -> cluster, rpc (message bounds), wire,
#                    the lease proto (sluice_lease_proto), gRPC: the grant
#                    tree's wire (the lease codec, a leaf's UpstreamStore,
#                    a central replica's LeaseServiceImpl). cluster does not
#                    see it; server/app composes it.
#   server/metrics   -> core, prometheus-cpp.
#   server/http      sluice_http -> rpc, proto: the HTTP/JSON decision API,
#                    which calls DecisionServiceImpl's per-call handlers and
#                    holds no decision logic. Boost.Beast and Asio are
#                    linked privately; no public header includes them.
#                    sluice_http_parser, its request parser, needs only
#                    absl (and Beast privately), for the fuzzer.
#   server/app       -> everything above: the composition root.
#   client_sdk       include/ is its only public include directory; proto
#                    and gRPC stay private (src/). It sees no server/ layer.
#   tools/           -> policy, proto.
#   tests/           a test sees tests/ (sluice_testing) and the layers it
#                    links, nothing else.
#
# How the build enforces them:
#
# 1. sluice_public_headers(<target>) stages the headers of the target's
#    source directory as symlinks under
#    ${CMAKE_BINARY_DIR}/layers/<target>/<path from the repository root>/ and
#    makes that directory the target's PUBLIC include directory. The include
#    spelling stays "server/core/engine.h", but a file now finds only the
#    headers of itself and of the libraries it links: including a layer you
#    do not link is "No such file or directory". There is no include
#    directory for the repository root.
#
# 2. sluice_forbid_includes(<target> REASON ... PREFIXES ...) puts, for the
#    target's own compilation only, a directory of poison headers in front of
#    the system include path: one per header of the system libraries under
#    the given prefixes (e.g. grpcpp, google/protobuf), each an #error naming
#    the rule. It also compiles one file that includes every public header of
#    the target, so a header no .cc of the layer includes is checked as well.
#
# 3. Every target defined under this project gets the warning flags
#    (sluice_apply_warnings, called once at the end of the top-level
#    CMakeLists.txt), except generated code (property SLUICE_GENERATED_CODE,
#    set by sluice_grpc_proto_library).
#
# Adding a library (the pattern to follow, e.g. for wire/ or tools/):
#
#   add_library(sluice_wire STATIC time.cc ...)
#   sluice_public_headers(sluice_wire)          # wire/*.h become "wire/x.h"
#   target_link_libraries(sluice_wire PUBLIC <only what its headers need>
#                                     PRIVATE <what its .cc files need>)
#
# Two libraries in one directory list their headers:
#   sluice_public_headers(sluice_rpc HEADERS decision_convert.h ...)
# An executable links what it includes and needs no call at all, unless it
# includes headers of its own directory by their full path
# ("tools/sluice-call/output.h"): then sluice_public_headers(<executable>).
# A test links sluice_testing for "tests/..." headers.
# A header that fails with "No such file or directory" after this change was
# reached through a library the target does not link: link that library
# (never add an include directory). Errors inside a header name its staged
# path, build/layers/<target>/..., a symlink to the source file.
# Not caught: a quote include relative to the including file's own directory
# ("admin_backend.h" from server/rpc/decision_service.cc finds the file next
# to it); the tree spells every include from the repository root instead.
# A library the SDK links (sluice_client) must be installed and exported with
# it: add it to install(TARGETS ... EXPORT sluice_clientTargets) in
# client_sdk/CMakeLists.txt (see sluice_proto there).

# sluice_public_headers(<target> [HEADERS <file>...] [RECURSE])
#   Without HEADERS: every *.h in the current source directory (and its
#   subdirectories with RECURSE). HEADERS are relative to the current source
#   directory. New headers are picked up at the next build (CONFIGURE_DEPENDS).
function(sluice_public_headers target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "RECURSE" "" "HEADERS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
      "sluice_public_headers(${target}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(src ${CMAKE_CURRENT_SOURCE_DIR})
  if(arg_HEADERS)
    set(headers ${arg_HEADERS})
  elseif(arg_RECURSE)
    file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE ${src} ${src}/*.h)
  else()
    file(GLOB headers CONFIGURE_DEPENDS RELATIVE ${src} ${src}/*.h)
  endif()

  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${src})
  set(stage ${CMAKE_BINARY_DIR}/layers/${target})
  # Restaged at every configure, so a removed header does not linger.
  file(REMOVE_RECURSE ${stage})
  set(staged)
  foreach(header IN LISTS headers)
    if(NOT EXISTS ${src}/${header})
      message(FATAL_ERROR
        "sluice_public_headers(${target}): no header ${src}/${header}")
    endif()
    get_filename_component(dir ${stage}/${rel}/${header} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${src}/${header} ${stage}/${rel}/${header} SYMBOLIC)
    list(APPEND staged ${rel}/${header})
  endforeach()

  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    set(scope INTERFACE)
  else()
    set(scope PUBLIC)
  endif()
  target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${stage}>)
  set_property(TARGET ${target} PROPERTY SLUICE_PUBLIC_HEADERS ${staged})
endfunction()

# sluice_forbid_includes(<target> REASON <text> PREFIXES <dir>...)
#   <dir> is a header directory of a system library, e.g. grpcpp or
#   google/protobuf. Call after sluice_public_headers(<target>).
function(sluice_forbid_includes target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "REASON" "PREFIXES")
  set(poison ${CMAKE_BINARY_DIR}/forbidden/${target})

  # Every header under each prefix, in each system include directory.
  set(roots ${CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES} /usr/local/include
    /usr/include)
  list(REMOVE_DUPLICATES roots)
  set(forbidden)
  foreach(prefix IN LISTS arg_PREFIXES)
    foreach(root IN LISTS roots)
      if(IS_DIRECTORY ${root}/${prefix})
        file(GLOB_RECURSE found LIST_DIRECTORIES false RELATIVE ${root}
          ${root}/${prefix}/*)
        list(APPEND forbidden ${found})
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES forbidden)
  list(SORT forbidden)

  # Rewritten only when the list or the reason changes.
  string(SHA1 hash "${arg_REASON};${forbidden}")
  set(stamp ${poison}/.stamp)
  set(old_hash "")
  if(EXISTS ${stamp})
    file(READ ${stamp} old_hash)
  endif()
  if(NOT old_hash STREQUAL hash)
    file(REMOVE_RECURSE ${poison})
    foreach(header IN LISTS forbidden)
      file(WRITE ${poison}/${header}
        "#error \"${arg_REASON}: it must not include <${header}>\"\n")
    endforeach()
    file(WRITE ${stamp} "${hash}")
  endif()
  target_include_directories(${target} BEFORE PRIVATE ${poison})

  # One file that includes every public header of the target.
  get_target_property(headers ${target} SLUICE_PUBLIC_HEADERS)
  if(NOT headers)
    message(FATAL_ERROR "sluice_forbid_includes(${target}): call "
      "sluice_public_headers(${target}) first")
  endif()
  set(content "// Generated: compiles every public header of ${target} under its include rules.\n")
  foreach(header IN LISTS headers)
    string(APPEND content "#include \"${header}\"\n")
  endforeach()
  set(all_headers ${CMAKE_BINARY_DIR}/forbidden/${target}_headers.cc)
  file(CONFIGURE OUTPUT ${all_headers} CONTENT "${content}")
  target_sources(${target} PRIVATE ${all_headers})
endfunction()

# The warnings of our own code. SLUICE_WERROR makes them errors;
# SLUICE_THREAD_SAFETY_CHECK adds clang's -Wthread-safety (it checks the
# ABSL_GUARDED_BY / HotMutex annotations).
set(SLUICE_WARNING_FLAGS -Wall -Wextra -Wno-unused-parameter)
if(SLUICE_THREAD_SAFETY_CHECK)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SLUICE_THREAD_SAFETY_CHECK needs clang "
      "(-DCMAKE_CXX_COMPILER=clang++), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  list(APPEND SLUICE_WARNING_FLAGS -Wthread-safety)
endif()
if(SLUICE_WERROR)
  list(APPEND SLUICE_WARNING_FLAGS -Werror)
  if((SLUICE_SANITIZE OR SLUICE_TSAN) AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # g++ 12 with -fsanitize reports -Wmaybe-uninitialized inside
    # libstdc++'s <regex> (std::function in _State) for tests that use
    # std::regex; the plain build has no such warning and keeps it an error.
    list(APPEND SLUICE_WARNING_FLAGS -Wno-error=maybe-uninitialized)
  endif()
endif()

# sluice_apply_warnings(<dir>)
#   Adds SLUICE_WARNING_FLAGS to every compiled target defined in <dir> and
#   below, except those with the property SLUICE_GENERATED_CODE.
function(sluice_apply_warnings dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(generated ${target} SLUICE_GENERATED_CODE)
    if(type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$"
        AND NOT generated)
      target_compile_options(${target} PRIVATE ${SLUICE_WARNING_FLAGS})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    sluice_apply_warnings(${subdir})
  endforeach()
endfunction()
