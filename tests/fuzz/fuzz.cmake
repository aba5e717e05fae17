# libFuzzer targets for Rescale's parsers of untrusted input (tests/fuzz/,
# layout in tests/fuzz/README.md). Included from the top-level CMakeLists.txt
# only with -DRESCALE_FUZZ=ON, in a build tree of its own (build-fuzz/, made
# by `make fuzz`) configured with CC=clang CXX=clang++.
#
# The targets do not link the project's libraries: those hold the gRPC
# server, the planner, the simulator and the CLI, and compiling all of them
# with sanitizers would take most of CI's fuzzing budget. Each fuzz library
# below compiles just the parser sources a target reaches, with
# -fsanitize=fuzzer-no-link (coverage without libFuzzer's main); only the
# executables link -fsanitize=fuzzer.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "RESCALE_FUZZ needs clang (libFuzzer): configure with "
                      "-DCMAKE_CXX_COMPILER=clang++ (make fuzz does)")
endif()

set(RESCALE_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz)
# -O1 keeps the build short and the runs fast; line tables are enough for
# the sanitizers' stack traces.
set(RESCALE_FUZZ_FLAGS -O1 -gline-tables-only -fno-omit-frame-pointer
    -fsanitize=address,undefined -fno-sanitize-recover=all)

# A library of parser sources, instrumented for fuzzing.
function(rescale_fuzz_library name)
  add_library(${name} STATIC ${ARGN})
  target_compile_options(${name} PRIVATE ${RESCALE_FUZZ_FLAGS} -fsanitize=fuzzer-no-link)
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}
    ${CMAKE_CURRENT_SOURCE_DIR}/include ${PROTO_GEN_DIR})
endfunction()

# A fuzz target tests/fuzz/<name>.cc, linked with libFuzzer's main.
set(RESCALE_FUZZ_TARGETS)
function(rescale_fuzz_target name)
  add_executable(fuzz_${name} ${RESCALE_FUZZ_DIR}/${name}.cc)
  target_compile_options(fuzz_${name} PRIVATE ${RESCALE_FUZZ_FLAGS} -fsanitize=fuzzer)
  target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_${name} PRIVATE ${ARGN})
  set(RESCALE_FUZZ_TARGETS ${RESCALE_FUZZ_TARGETS} fuzz_${name} PARENT_SCOPE)
endfunction()

# The rescale.v1 messages alone (no gRPC stubs, no health service), and the
# core's types, validation and proto conversion.
rescale_fuzz_library(rescale_fuzz_core
  ${PROTO_GEN_DIR}/rescale/v1/rescale.pb.cc
  src/types.cc
  src/read_file.cc
  src/validation.cc
  src/names.cc
  src/queues.cc
  src/goodput.cc
  server/convert.cc)
target_link_libraries(rescale_fuzz_core PUBLIC protobuf::libprotobuf absl::status absl::statusor
  absl::strings absl::str_format absl::time gRPC::grpc++ yaml-cpp)
# The generated code is not ours to warn about.
set_source_files_properties(${PROTO_GEN_DIR}/rescale/v1/rescale.pb.cc PROPERTIES COMPILE_OPTIONS -w)

rescale_fuzz_library(rescale_fuzz_metrics_store
  src/epoch.cc src/metrics_store.cc src/metrics_store_ingest.cc src/metrics_store_stats.cc
  src/job_rules.cc)
target_link_libraries(rescale_fuzz_metrics_store PUBLIC rescale_fuzz_core absl::synchronization
  absl::flat_hash_map absl::hash absl::btree spdlog::spdlog Threads::Threads)

rescale_fuzz_library(rescale_fuzz_agent client/agent/parser.cc)
target_link_libraries(rescale_fuzz_agent PUBLIC absl::status absl::statusor absl::strings)

# manifests.cc includes the gRPC stubs' headers (it lives beside the RPC
# code); listing them makes CMake generate them. Nothing of them is linked.
rescale_fuzz_library(rescale_fuzz_rescalectl
  client/rescalectl/manifests.cc client/rescalectl/yaml_json.cc
  ${PROTO_GEN_DIR}/rescale/v1/rescale.grpc.pb.h ${PROTO_GEN_DIR}/grpc/health/v1/health.grpc.pb.h
  ${PROTO_GEN_DIR}/grpc/health/v1/health.pb.h)
target_link_libraries(rescale_fuzz_rescalectl PUBLIC rescale_fuzz_core yaml-cpp
  nlohmann_json::nlohmann_json CLI11::CLI11)

rescale_fuzz_library(rescale_fuzz_adapter
  client/adapter/kube_config.cc client/adapter/pytorchjob.cc client/adapter/trainjob.cc
  client/adapter/node_capacity.cc)
target_link_libraries(rescale_fuzz_adapter PUBLIC rescale_fuzz_core yaml-cpp
  nlohmann_json::nlohmann_json)

rescale_fuzz_library(rescale_fuzz_sim
  bench/sim/workload.cc bench/sim/csv.cc bench/sim/profiles.cc bench/sim/pollux_traces.cc)
target_link_libraries(rescale_fuzz_sim PUBLIC rescale_fuzz_core nlohmann_json::nlohmann_json)
target_compile_definitions(rescale_fuzz_sim PRIVATE
  RESCALE_SIM_POLLUX_TRACES_DIR="${CMAKE_CURRENT_SOURCE_DIR}/tests/data/pollux")

rescale_fuzz_target(agent_log_line rescale_fuzz_agent)
rescale_fuzz_target(rescalectl_manifest rescale_fuzz_rescalectl)
rescale_fuzz_target(kubeconfig rescale_fuzz_adapter)
rescale_fuzz_target(pytorchjob rescale_fuzz_adapter)
rescale_fuzz_target(sim_workload rescale_fuzz_sim)
rescale_fuzz_target(proto_job_spec rescale_fuzz_core)
rescale_fuzz_target(queue_file rescale_fuzz_core)
rescale_fuzz_target(proto_sample_batch rescale_fuzz_metrics_store)

# `cmake --build build-fuzz --target fuzz_targets` builds every target and
# nothing else of the project.
add_custom_target(fuzz_targets DEPENDS ${RESCALE_FUZZ_TARGETS})
