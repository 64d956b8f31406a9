# SPDX-License-Identifier: Apache-2.0
# sluice_grpc_proto_library(<target> PROTOS <file>... IMPORT_ROOT <dir>)
#
# Generates the C++ messages and gRPC stubs of PROTOS (absolute paths under
# IMPORT_ROOT, the --proto_path they import each other by) into
# ${CMAKE_CURRENT_BINARY_DIR}/gen and builds them into the static library
# <target>. Its PUBLIC include directory is gen/, so a file includes
# "<path under IMPORT_ROOT>/<name>.pb.h" (or .grpc.pb.h). Generated code is
# compiled without warnings and is exempt from SLUICE_WARNING_FLAGS.
function(sluice_grpc_proto_library target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "IMPORT_ROOT" "PROTOS")
  if(NOT arg_PROTOS OR NOT arg_IMPORT_ROOT)
    message(FATAL_ERROR
      "sluice_grpc_proto_library(${target}): needs PROTOS and IMPORT_ROOT")
  endif()
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR}/gen)
  file(MAKE_DIRECTORY ${gen_dir})
  set(gen_srcs)
  foreach(proto IN LISTS arg_PROTOS)
    file(RELATIVE_PATH rel ${arg_IMPORT_ROOT} ${proto})
    if(rel MATCHES "^\\.\\./")
      message(FATAL_ERROR
        "sluice_grpc_proto_library(${target}): ${proto} is not under ${arg_IMPORT_ROOT}")
    endif()
    string(REGEX REPLACE "\\.proto$" "" out ${gen_dir}/${rel})
    add_custom_command(
      OUTPUT ${out}.pb.cc ${out}.pb.h ${out}.grpc.pb.cc ${out}.grpc.pb.h
      COMMAND protobuf::protoc
        --proto_path=${arg_IMPORT_ROOT}
        --cpp_out=${gen_dir}
        --grpc_out=${gen_dir}
        --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>
        ${proto}
      DEPENDS ${proto} protobuf::protoc gRPC::grpc_cpp_plugin
      COMMENT "protoc ${rel}")
    list(APPEND gen_srcs ${out}.pb.cc ${out}.grpc.pb.cc)
  endforeach()

  add_library(${target} STATIC ${gen_srcs})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${gen_dir}>)
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf gRPC::grpc++)
  # Generated code is not ours to warn about.
  target_compile_options(${target} PRIVATE -w)
  set_property(TARGET ${target} PROPERTY SLUICE_GENERATED_CODE TRUE)
endfunction()
