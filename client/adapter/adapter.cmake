# rescale-adapter: the Kubernetes controller adapter (client/adapter/: the
# Kubernetes client and kubeconfig, the PyTorchJob mapping, the controller)
# and its tests, which run the real
# libcurl client against an in-process fake API server (cpp-httplib, test
# only) and a real in-process rescaled. Included from the top-level
# CMakeLists.txt after the tests section.
find_package(CURL REQUIRED)
find_package(PkgConfig REQUIRED)

add_library(rescale_adapter_lib
  client/adapter/pytorchjob.cc
  client/adapter/node_capacity.cc
  client/adapter/trainjob.cc
  client/adapter/job_events.cc
  client/adapter/controller.cc
  client/adapter/capacity_sync.cc
  client/adapter/kueue.cc
  client/adapter/kueue_sync.cc
  client/adapter/apply_job.cc
  client/adapter/list_watch.cc
  client/adapter/kube_config.cc
  client/adapter/curl_kube_client.cc
  client/adapter/adapter_metrics.cc
)
target_include_directories(rescale_adapter_lib PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(rescale_adapter_lib PUBLIC rescale_base rescale_client_common rescale_proto CURL::libcurl
  nlohmann_json::nlohmann_json yaml-cpp absl::status absl::statusor absl::strings
  absl::synchronization absl::time spdlog::spdlog Threads::Threads
  prometheus-cpp::core prometheus-cpp::pull)

add_executable(rescale-adapter client/adapter/main.cc)
target_link_libraries(rescale-adapter PRIVATE rescale_adapter_lib
  CLI11::CLI11)
install(TARGETS rescale-adapter RUNTIME DESTINATION bin)

if(NOT RESCALE_SANITIZE STREQUAL "thread")
  pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
  add_executable(adapter_tests
    tests/test_main.cc
    tests/fake_kube_api.cc
    tests/child_process.cc
    tests/etcd_cluster.cc
    tests/adapter_test.cc
    tests/adapter_plan_test.cc
    tests/adapter_kueue_test.cc
    tests/adapter_types_test.cc
    tests/node_capacity_test.cc
    tests/client_common_test.cc
    tests/k8s_security_test.cc
  )
  # The high-availability case also runs the agent's sender against two
  # rescaled processes of this build on a real etcd.
  target_link_libraries(adapter_tests PRIVATE rescale_adapter_lib rescale_agent_lib rescale_server
    PkgConfig::CPP_HTTPLIB yaml-cpp Catch2::Catch2)
  target_compile_definitions(adapter_tests PRIVATE
    RESCALE_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}"
    RESCALED_BINARY="$<TARGET_FILE:rescaled>")
  add_dependencies(adapter_tests rescaled)
  catch_discover_tests(adapter_tests PROPERTIES LABELS adapter)
endif()
