// Reading the Pollux trace CSVs in tests (tests/data/pollux/APP/*.csv): each
// row as a map from column name to field. The traces are plain CSV (no
// quoting), so a split on commas reads them.
#ifndef RESCALE_TESTS_TRACE_CSV_H_
#define RESCALE_TESTS_TRACE_CSV_H_

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace rescale::testing {

using CsvRow = std::map<std::string, std::string>;

inline std::vector<CsvRow> ReadCsv(const std::string& path) {
  std::ifstream in(path);
  INFO(path);
  REQUIRE(in.good());
  std::vector<CsvRow> rows;
  std::string line;
  std::vector<std::string> header;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::stringstream stream(line);
    for (std::string field; std::getline(stream, field, ',');) fields.push_back(field);
    if (header.empty()) {
      header = fields;
      continue;
    }
    CsvRow row;
    for (size_t i = 0; i < header.size() && i < fields.size(); ++i) row[header[i]] = fields[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_TRACE_CSV_H_
