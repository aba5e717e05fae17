# rescale_client_common: what rescalectl, rescale-adapter and rescale-agent
# share (client/common/): credentials and tokens for reaching rescaled, the
# one retry backoff, and the list of rescaled replicas that follows the
# leader, and the SetQueues request of a queue set. Files are read by rescale_base's ReadFileToString.
# Included from the top-level CMakeLists.txt, so paths are relative to the
# source root.
add_library(rescale_client_common
  client/common/backoff.cc
  client/common/credentials.cc
  client/common/server_list.cc
  client/common/queues_request.cc
)
target_include_directories(rescale_client_common PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(rescale_client_common PUBLIC rescale_base rescale_proto gRPC::grpc++ absl::status absl::statusor
  absl::strings absl::str_format absl::time CLI11::CLI11)
