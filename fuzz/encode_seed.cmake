# SPDX-License-Identifier: Apache-2.0
# cmake -P script (sluice_fuzz_encode_seeds): encodes the text-format
# message TEXT, of type TYPE defined in PROTO under PROTO_ROOT, into the
# binary seed SEED with PROTOC.
foreach(var PROTOC PROTO_ROOT PROTO TYPE TEXT SEED)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "encode_seed.cmake: ${var} is not set")
  endif()
endforeach()
execute_process(
  COMMAND ${PROTOC} --proto_path=${PROTO_ROOT} --encode=${TYPE} ${PROTO}
  INPUT_FILE ${TEXT}
  OUTPUT_FILE ${SEED}.tmp
  ERROR_VARIABLE error
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${SEED}.tmp)
  message(FATAL_ERROR "cannot encode ${TEXT} as ${TYPE}: ${error}")
endif()
file(RENAME ${SEED}.tmp ${SEED})
