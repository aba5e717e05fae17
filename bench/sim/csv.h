// Minimal CSV reading and writing for the simulator's inputs and outputs:
// RFC 4180 quoting (fields may be quoted, quotes doubled inside), a header
// row that names the columns, and lookup of columns by name so files may
// order their columns freely. No dependency exists for this on the machine,
// and the simulator's needs are small.
#ifndef RESCALE_BENCH_SIM_CSV_H_
#define RESCALE_BENCH_SIM_CSV_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rescale::sim {

// Debian's Abseil has its own string_view type (not std::string_view):
// these convert at the boundary without copying.
inline absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view Std(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// A parsed CSV text: the header's column names and the data rows. Blank
// lines and lines starting with '#' are skipped (comments in hand-written
// workloads).
struct CsvTable {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  // 1-based line number of each row in the text, for error messages.
  std::vector<int> line_numbers;

  // Index of `column`, or nullopt.
  std::optional<size_t> Find(std::string_view column) const;
};

// Parses `text`; INVALID_ARGUMENT (naming the line) for text that is not
// UTF-8, an unterminated quote or a row with more fields than the header.
absl::StatusOr<CsvTable> ParseCsv(std::string_view text);

// `field` quoted when it holds a comma, quote or line break, starts with '#'
// (a comment line otherwise) or has leading or trailing blanks.
std::string CsvField(std::string_view field);

// Files are read with rescale/read_file.h's ReadFileToString, the one rule
// for every program.
// Writes a whole file; INTERNAL when it cannot be written.
absl::Status WriteFile(const std::string& path, std::string_view contents);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_CSV_H_
