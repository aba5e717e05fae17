# rescale-agent: the log-tailing agent (client/agent/), included from the
# top-level CMakeLists.txt after the tests section.
#   rescale_agent_lib  parsers, file follower, reliable sender
#   rescale-agent      the binary
#   agent_tests        its Catch2 suite (label "agent"), against a real
#                      in-process rescaled, some through the binary; not
#                      part of the TSan build, which runs only the core's
#                      [concurrency] tests
add_library(rescale_agent_lib
  client/agent/parser.cc
  client/agent/sender.cc
  client/agent/source.cc
)
target_include_directories(rescale_agent_lib PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(rescale_agent_lib PUBLIC rescale_base rescale_client_common rescale_proto gRPC::grpc++
  absl::status absl::statusor absl::strings absl::time absl::synchronization
  spdlog::spdlog)

add_executable(rescale-agent client/agent/main.cc)
target_link_libraries(rescale-agent PRIVATE rescale_agent_lib
  CLI11::CLI11 absl::str_format)

if(NOT RESCALE_SANITIZE STREQUAL "thread")
  add_executable(agent_tests tests/test_main.cc tests/agent_test.cc tests/agent_binary_test.cc
    tests/child_process.cc)
  target_link_libraries(agent_tests PRIVATE rescale_agent_lib rescale_server Catch2::Catch2)
  # agent_binary_test.cc runs the binary itself (its flags and environment).
  target_compile_definitions(agent_tests PRIVATE
    RESCALE_AGENT_BINARY="$<TARGET_FILE:rescale-agent>")
  add_dependencies(agent_tests rescale-agent)
  catch_discover_tests(agent_tests PROPERTIES LABELS agent)
endif()

install(TARGETS rescale-agent RUNTIME DESTINATION bin)
