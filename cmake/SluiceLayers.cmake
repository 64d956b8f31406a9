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
#   base/            what every layer above core may use (files, periodic
#                    work, backoff, command-line helpers, the stats
#                    interface): absl, POSIX and threads only, CLI11 for
#                    its command-line helpers; nothing of Sluice's domain.
#   server/policy    -> core, base, proto (sluice_proto); yaml-cpp
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
#   server/tls       sluice_tls -> base, OpenSSL, gRPC: the listeners'
#                    certificates and their rotation.
#   server/http      sluice_http -> rpc, proto: the HTTP/JSON decision API,
#                    which calls DecisionServiceImpl's per-call handlers and
#                    holds no decision logic. Boost.Beast and Asio are
#                    linked privately; no public header includes them.
#                    sluice_http_parser, its request parser, needs only
#                    absl (and Beast privately), for the fuzzer.
#   server/app       -> everything above: the composition root.
#   client_sdk       include/ is its only public include directory; proto
#                    and gRPC stay private (src/). It sees no server/ layer.
#   tools/           -> wire, proto; sluicectl also policy.
#   tests/           a test sees tests/ (sluice_testing) and the layers it
#                    links, nothing else; nothing outside tests/ links
#                    tests/.
#
# The table of what each layer may link is at the end of this file
# (sluice_layer_rule); docs/architecture.md, "Layers", says it in words.
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
# 4. sluice_check_links(), the last call of the top-level CMakeLists.txt,
#    checks every link of every target against the layer table and fails
#    configure on a link the table does not allow (see "The link rules"
#    below).
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
# ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations).
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

# ---------------------------------------------------------------------------
# The link rules: which layer each project target belongs to, which layers
# and external libraries each layer may link, and the check that runs once at
# the end of configure (sluice_check_links, the last call of the top-level
# CMakeLists.txt). It is the build's equivalent of Bazel's visibility: a
# target_link_libraries that breaks the table fails configure, naming the
# target, the link, both layers and the rule.
#
# A target's layer is its SLUICE_LAYER property (sluice_layer(<target>
# <layer>)), or else the layer of the longest directory of
# sluice_layer_directory that holds its CMakeLists.txt.
#
# Only direct links are checked: LINK_LIBRARIES and INTERFACE_LINK_LIBRARIES
# (a static library's private links there as $<LINK_ONLY:...>) of every
# project target. That is enough, since every project target is checked:
# what a target reaches through another one's PUBLIC links was allowed,
# link by link, on the way there. What a library links PUBLIC its users see
# too (its headers, and the headers of what it links PUBLIC).
#
# An imported target or a plain library name must match an external of the
# table (sluice_external); an unknown one is a violation too, so a new
# dependency is a line here before it is a line anywhere else.

# sluice_external(<name> <regex>)
#   The external library <name>: every imported target (or plain library
#   name, e.g. CMAKE_DL_LIBS's "dl") whose name matches <regex>.
function(sluice_external name regex)
  set_property(GLOBAL APPEND PROPERTY SLUICE_EXTERNALS ${name})
  set_property(GLOBAL PROPERTY SLUICE_EXTERNAL_REGEX_${name} "${regex}")
endfunction()

# sluice_layer_rule(<layer> [LAYERS <layer>...] [EXTERNAL <name>...])
#   Targets of <layer> may link targets of <layer> itself, of LAYERS, and the
#   EXTERNAL libraries ("*": every one); nothing else. ALL_LAYERS in LAYERS
#   stands for every layer.
function(sluice_layer_rule layer)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "LAYERS;EXTERNAL")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
      "sluice_layer_rule(${layer}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set_property(GLOBAL APPEND PROPERTY SLUICE_LAYERS ${layer})
  set_property(GLOBAL PROPERTY SLUICE_LAYER_LINKS_${layer} ${arg_LAYERS})
  set_property(GLOBAL PROPERTY SLUICE_LAYER_EXTERNAL_${layer} ${arg_EXTERNAL})
endfunction()

# sluice_layer_directory(<directory> <layer>)
#   Every target defined under <directory> (relative to the repository root)
#   is in <layer>, unless a longer directory of the table or sluice_layer
#   says otherwise.
function(sluice_layer_directory directory layer)
  set_property(GLOBAL APPEND PROPERTY SLUICE_LAYER_DIRECTORIES
    "${directory}=${layer}")
endfunction()

# sluice_layer(<target> <layer>): <target>'s layer, whatever its directory.
function(sluice_layer target layer)
  set_property(TARGET ${target} PROPERTY SLUICE_LAYER ${layer})
endfunction()

# sluice_link_exception(<target> <link> REASON <text>)
#   A link known to break the table, allowed until the code moves. The check
#   fails when the exception is no longer needed (the link is gone or is
#   allowed now), so the list only shrinks. Ignored when <target> is not
#   built in this configuration.
function(sluice_link_exception target link)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "REASON" "")
  if(NOT arg_REASON OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
      "sluice_link_exception(${target} ${link} REASON <text>): got ${ARGN}")
  endif()
  set_property(GLOBAL APPEND PROPERTY SLUICE_LINK_EXCEPTIONS "${target}|${link}")
  set_property(GLOBAL PROPERTY "SLUICE_LINK_EXCEPTION_${target}|${link}"
    "${arg_REASON}")
endfunction()

# --- The external libraries.
sluice_external(abseil "^absl::")
sluice_external(threads "^Threads::Threads$")
sluice_external(dl "^dl$")
sluice_external(grpc "^gRPC::")
sluice_external(protobuf "^protobuf::")
sluice_external(hiredis "^PkgConfig::HIREDIS$")
sluice_external(spdlog "^spdlog::")
sluice_external(yaml-cpp "^yaml-cpp(::yaml-cpp)?$")
sluice_external(json "^nlohmann_json::")
sluice_external(prometheus "^prometheus-cpp::")
sluice_external(boost "^Boost::")
sluice_external(openssl "^OpenSSL::")
sluice_external(cli11 "^CLI11::")
sluice_external(httplib "^PkgConfig::HTTPLIB$")
sluice_external(gtest "^GTest::")
sluice_external(benchmark "^benchmark::")

# --- The layers, bottom up (docs/architecture.md, "Layers", is this table
# in words). Every layer above the core may link base; the core may not.
# enums (wire/enums) is one header of macro lists that includes nothing: the
# core generates its enums from it, wire checks it against the .proto, and
# the SDK its conversions.
sluice_layer_rule(enums)
sluice_layer_rule(core LAYERS enums EXTERNAL abseil)
sluice_layer_rule(base EXTERNAL abseil threads cli11)
sluice_layer_rule(proto EXTERNAL grpc protobuf)
sluice_layer_rule(wire LAYERS enums proto base EXTERNAL abseil grpc protobuf)
sluice_layer_rule(policy LAYERS core wire proto base
  EXTERNAL abseil protobuf yaml-cpp json threads)
sluice_layer_rule(cluster LAYERS core policy wire base
  EXTERNAL abseil hiredis spdlog threads)
sluice_layer_rule(rpc LAYERS core policy wire proto base
  EXTERNAL abseil grpc protobuf spdlog)
sluice_layer_rule(tree LAYERS core cluster rpc wire proto base
  EXTERNAL abseil grpc protobuf spdlog)
sluice_layer_rule(metrics LAYERS core base EXTERNAL abseil prometheus)
sluice_layer_rule(tls LAYERS base EXTERNAL abseil grpc openssl spdlog threads)
sluice_layer_rule(http LAYERS core rpc wire proto base
  EXTERNAL abseil protobuf boost openssl spdlog threads)
sluice_layer_rule(app
  LAYERS core base proto wire policy cluster rpc tree metrics tls http
  EXTERNAL abseil grpc protobuf spdlog cli11 threads)
sluice_layer_rule(sdk LAYERS enums wire proto base EXTERNAL abseil grpc protobuf threads)
sluice_layer_rule(examples LAYERS sdk wire base
  EXTERNAL abseil httplib yaml-cpp json threads)
# The tools: sluice-call, sluice-bench, policy-schema. sluicectl is a layer of
# its own only because it may also link policy (the policies-file format and
# the server's validation rules).
sluice_layer_rule(tools LAYERS wire proto base
  EXTERNAL abseil grpc protobuf cli11 json httplib threads)
sluice_layer_rule(sluicectl LAYERS tools policy wire proto base
  EXTERNAL abseil grpc protobuf cli11 json threads)
# A test may link any layer (a test of a layer links that layer; the
# whole-server tests link app) and any external; nothing but a test or a
# benchmark links tests/ (sluice_testing: its fakes, harnesses and the
# build's paths).
sluice_layer_rule(test LAYERS ALL_LAYERS EXTERNAL *)
# Benchmarks drive the production layers; the cluster and tree benchmarks run
# on the tests' fixtures (FakeClock, FakeStore, the Redis and sluiced
# harnesses), as the scenario tests do, so they may link sluice_testing.
# Fuzz targets drive the production layers only.
sluice_layer_rule(bench
  LAYERS core base proto wire policy cluster rpc tree metrics tls http app
    tools sdk test
  EXTERNAL abseil grpc protobuf hiredis benchmark threads)
sluice_layer_rule(fuzz
  LAYERS core base proto wire policy cluster rpc tree metrics tls http app
  EXTERNAL abseil protobuf)

# --- Where each layer lives.
sluice_layer_directory(server/core core)
sluice_layer_directory(base base)
sluice_layer_directory(proto proto)
sluice_layer_directory(wire wire)
sluice_layer_directory(wire/enums enums)
sluice_layer_directory(server/policy policy)
sluice_layer_directory(server/cluster cluster)
sluice_layer_directory(server/rpc rpc)
sluice_layer_directory(server/tree tree)
sluice_layer_directory(server/metrics metrics)
sluice_layer_directory(server/tls tls)
sluice_layer_directory(server/http http)
sluice_layer_directory(server/app app)
sluice_layer_directory(client_sdk sdk)
sluice_layer_directory(client_sdk/examples examples)
sluice_layer_directory(tools tools)
sluice_layer_directory(tools/sluicectl sluicectl)
sluice_layer_directory(tests test)
sluice_layer_directory(bench bench)
sluice_layer_directory(fuzz fuzz)

# --- Links known to break the table, each until the code it names moves:
# none today. Add one as
#   sluice_link_exception(<target> <link> REASON "<why, and until when>")

# _sluice_layer_of(<target> <out>): <target>'s layer, "" when it has none;
# <out>_dir: its directory, relative to the repository root.
function(_sluice_layer_of target out)
  get_target_property(dir ${target} SOURCE_DIR)
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${dir})
  if(rel STREQUAL "")
    set(${out}_dir "." PARENT_SCOPE)
  else()
    set(${out}_dir "${rel}" PARENT_SCOPE)
  endif()
  get_target_property(layer ${target} SLUICE_LAYER)
  if(layer)
    set(${out} ${layer} PARENT_SCOPE)
    return()
  endif()
  set(layer "")
  set(longest -1)
  get_property(table GLOBAL PROPERTY SLUICE_LAYER_DIRECTORIES)
  foreach(entry IN LISTS table)
    string(REPLACE "=" ";" entry "${entry}")
    list(GET entry 0 prefix)
    list(GET entry 1 candidate)
    string(FIND "${rel}/" "${prefix}/" at)
    string(LENGTH "${prefix}" length)
    if(at EQUAL 0 AND length GREATER longest)
      set(layer ${candidate})
      set(longest ${length})
    endif()
  endforeach()
  set(${out} "${layer}" PARENT_SCOPE)
endfunction()

# _sluice_collect_targets(<dir> <out>): every target defined in <dir> and
# below that links (no custom targets), appended to <out>.
function(_sluice_collect_targets dir out)
  set(found ${${out}})
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|INTERFACE_LIBRARY)$")
      list(APPEND found ${target})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    _sluice_collect_targets(${subdir} found)
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

# _sluice_rule_text(<layer> <out>): the rule of <layer>, as the error quotes
# it.
function(_sluice_rule_text layer out)
  get_property(links GLOBAL PROPERTY SLUICE_LAYER_LINKS_${layer})
  get_property(externals GLOBAL PROPERTY SLUICE_LAYER_EXTERNAL_${layer})
  list(PREPEND links ${layer})
  list(JOIN links ", " links)
  if(externals)
    list(JOIN externals ", " externals)
  else()
    set(externals "none")
  endif()
  set(${out} "${layer} may link ${links} (externals: ${externals})" PARENT_SCOPE)
endfunction()

# sluice_check_links(): checks every link of every target of this build
# against the table above. Call once, after every target is defined.
function(sluice_check_links)
  get_property(layers GLOBAL PROPERTY SLUICE_LAYERS)
  get_property(externals GLOBAL PROPERTY SLUICE_EXTERNALS)
  get_property(exceptions GLOBAL PROPERTY SLUICE_LINK_EXCEPTIONS)
  set(targets "")
  _sluice_collect_targets(${CMAKE_SOURCE_DIR} targets)

  set(problems "")
  set(used "")
  foreach(target IN LISTS targets)
    _sluice_layer_of(${target} layer)
    if(NOT layer)
      list(APPEND problems "${target} (${layer_dir}) has no layer: add its \
directory with sluice_layer_directory, or call sluice_layer(${target} <layer>)")
      continue()
    endif()
    if(NOT layer IN_LIST layers)
      list(APPEND problems "${target} (${layer_dir}) is in layer ${layer}, \
which has no rule (sluice_layer_rule)")
      continue()
    endif()
    get_property(may_link GLOBAL PROPERTY SLUICE_LAYER_LINKS_${layer})
    get_property(may_use GLOBAL PROPERTY SLUICE_LAYER_EXTERNAL_${layer})

    get_target_property(links ${target} LINK_LIBRARIES)
    get_target_property(interface_links ${target} INTERFACE_LINK_LIBRARIES)
    set(all_links "")
    foreach(link IN LISTS links interface_links)
      # A static library's private links; the "::@(...)" markers CMake
      # writes around links added from another directory.
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" link "${link}")
      if(link AND NOT link MATCHES "-NOTFOUND$" AND NOT link MATCHES "^::@")
        list(APPEND all_links "${link}")
      endif()
    endforeach()
    list(REMOVE_DUPLICATES all_links)

    foreach(link IN LISTS all_links)
      set(allowed FALSE)
      set(what "")
      set(dependency "${link}")
      if(TARGET ${dependency})
        get_target_property(aliased ${dependency} ALIASED_TARGET)
        if(aliased)
          set(dependency ${aliased})
        endif()
        get_target_property(imported ${dependency} IMPORTED)
      else()
        set(imported TRUE)
      endif()
      if(NOT imported)
        _sluice_layer_of(${dependency} dependency_layer)
        if(NOT dependency_layer)
          # Reported as a target of its own.
          continue()
        endif()
        set(what "layer ${dependency_layer}, ${dependency_layer_dir}")
        if(dependency_layer STREQUAL layer OR dependency_layer IN_LIST may_link
            OR "ALL_LAYERS" IN_LIST may_link)
          set(allowed TRUE)
        endif()
      else()
        set(what "in no external library of the table (sluice_external)")
        foreach(external IN LISTS externals)
          get_property(regex GLOBAL PROPERTY SLUICE_EXTERNAL_REGEX_${external})
          if(link MATCHES "${regex}")
            set(what "external ${external}")
            if(external IN_LIST may_use OR "*" IN_LIST may_use)
              set(allowed TRUE)
            endif()
            break()
          endif()
        endforeach()
      endif()
      if(allowed)
        continue()
      endif()
      if("${target}|${link}" IN_LIST exceptions)
        list(APPEND used "${target}|${link}")
        continue()
      endif()
      _sluice_rule_text(${layer} rule)
      list(APPEND problems "${target} (layer ${layer}, ${layer_dir}) links \
${link} (${what})\n    rule: ${rule}")
    endforeach()
  endforeach()

  foreach(exception IN LISTS exceptions)
    string(REPLACE "|" ";" pair "${exception}")
    list(GET pair 0 target)
    list(GET pair 1 link)
    if(NOT TARGET ${target})
      continue()
    endif()
    if(exception IN_LIST used)
      get_property(reason GLOBAL PROPERTY "SLUICE_LINK_EXCEPTION_${exception}")
      message(STATUS "Link rules: known exception ${target} -> ${link}: ${reason}")
    else()
      list(APPEND problems "sluice_link_exception(${target} ${link}) is no \
longer needed (the link is gone or the table allows it now): delete it")
    endif()
  endforeach()

  list(LENGTH targets checked)
  if(problems)
    list(LENGTH problems count)
    list(JOIN problems "\n  " text)
    message(FATAL_ERROR "Link rules (cmake/SluiceLayers.cmake): ${count} \
problem(s) in the links of ${checked} targets:\n  ${text}\nLink only what \
the target's layer may use. If the rule itself is wrong, change the table in \
cmake/SluiceLayers.cmake and docs/architecture.md's \"Layers\" together.")
  endif()
  list(LENGTH used known)
  message(STATUS "Link rules: the links of ${checked} targets follow the \
layer table (${known} known exceptions)")
endfunction()
