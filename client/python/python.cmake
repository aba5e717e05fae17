# The Python trainer SDK (client/python): built into <build>/python by its
# own setup.py (which generates the gRPC code from proto/), and its pytest
# suite run against this build's rescaled. Debian's interpreter, not the
# first python3 on PATH: python3-grpcio, python3-torch and python3-pytest
# are installed for it (scripts/install-deps.sh).
set(RESCALE_PYTHON /usr/bin/python3 CACHE FILEPATH
    "Python with Debian's python3-grpcio, python3-protobuf, python3-pytest and python3-torch")
set(RESCALE_PYTHON_DIR ${CMAKE_CURRENT_SOURCE_DIR}/client/python)
file(GLOB RESCALE_PYTHON_SOURCES CONFIGURE_DEPENDS ${RESCALE_PYTHON_DIR}/rescale/*.py)
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/python/rescale/v1/rescale_pb2_grpc.py
  COMMAND ${RESCALE_PYTHON} -B setup.py -q build_py --build-lib ${CMAKE_BINARY_DIR}/python
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${RESCALE_PYTHON_DIR}/build
  WORKING_DIRECTORY ${RESCALE_PYTHON_DIR}
  DEPENDS ${RESCALE_PYTHON_SOURCES} ${RESCALE_PYTHON_DIR}/setup.py
          ${CMAKE_CURRENT_SOURCE_DIR}/proto/rescale/v1/rescale.proto
  COMMENT "Building the rescale Python package")
add_custom_target(python_sdk ALL DEPENDS ${CMAKE_BINARY_DIR}/python/rescale/v1/rescale_pb2_grpc.py)

# Every test file is one ctest entry, so `ctest -j` runs them side by side.
# Not in the sanitizer builds: they test the Python code, which no sanitizer
# instruments.
if(RESCALE_SANITIZE)
  return()
endif()
file(GLOB RESCALE_PYTHON_TESTS CONFIGURE_DEPENDS ${RESCALE_PYTHON_DIR}/tests/test_*.py)
foreach(test_file ${RESCALE_PYTHON_TESTS})
  get_filename_component(test_name ${test_file} NAME_WE)
  add_test(NAME python_${test_name}
    COMMAND ${RESCALE_PYTHON} -B -m pytest -q -p no:cacheprovider ${test_file}
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(python_${test_name} PROPERTIES LABELS python
    ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python;RESCALED=$<TARGET_FILE:rescaled>;PYTHONDONTWRITEBYTECODE=1")
endforeach()
# It asserts the job settles on the size with the best measured throughput,
# which other tests' load on the same two cores would distort.
set_tests_properties(python_test_launch PROPERTIES RUN_SERIAL TRUE)
