# rescalectl: the kubectl-style CLI (client/rescalectl/). Its tests are in
# server_tests (tests/rescalectl_test.cc), against a real in-process
# rescaled. Included from the top-level CMakeLists.txt.
add_library(rescalectl_lib
  client/rescalectl/cli.cc
  client/rescalectl/manifests.cc
  client/rescalectl/output.cc
  client/rescalectl/yaml_json.cc
  client/rescalectl/tables.cc
  client/rescalectl/describe.cc
  client/rescalectl/plot.cc
  client/rescalectl/queues.cc
)
target_include_directories(rescalectl_lib PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(rescalectl_lib PUBLIC rescale_proto rescale_client_common yaml-cpp
  nlohmann_json::nlohmann_json CLI11::CLI11 absl::strings absl::time)
add_executable(rescalectl client/rescalectl/main.cc)
target_link_libraries(rescalectl PRIVATE rescalectl_lib)
