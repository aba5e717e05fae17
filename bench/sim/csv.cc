// CSV reading and writing (see csv.h).
#include "bench/sim/csv.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"

namespace rescale::sim {

std::optional<size_t> CsvTable::Find(std::string_view column) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == column) return i;
  }
  return std::nullopt;
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

absl::StatusOr<CsvTable> ParseCsv(std::string_view text) {
  CsvTable table;
  size_t pos = 0;
  int line = 1;
  bool have_header = false;
  while (pos < text.size()) {
    const int row_line = line;
    // Skip blank and comment lines (only at the start of a record).
    size_t eol = text.find('\n', pos);
    std::string_view raw =
        text.substr(pos, eol == std::string_view::npos ? text.size() - pos : eol - pos);
    if (Trim(raw).empty() || Trim(raw).front() == '#') {
      pos = eol == std::string_view::npos ? text.size() : eol + 1;
      ++line;
      continue;
    }
    std::vector<std::string> fields;
    std::string field;
    bool quoted = false;
    bool field_was_quoted = false;
    bool row_done = false;
    while (!row_done) {
      if (pos >= text.size()) {
        if (quoted) {
          return absl::InvalidArgumentError(
              absl::StrFormat("line %d: unterminated quoted field", row_line));
        }
        row_done = true;
        break;
      }
      const char c = text[pos++];
      if (quoted) {
        if (c == '"') {
          if (pos < text.size() && text[pos] == '"') {
            field += '"';
            ++pos;
          } else {
            quoted = false;
          }
        } else {
          if (c == '\n') ++line;
          field += c;
        }
        continue;
      }
      if (c == '"' && Trim(field).empty()) {
        quoted = true;
        field_was_quoted = true;
        field.clear();
      } else if (c == ',') {
        fields.push_back(field_was_quoted ? field : std::string(Trim(field)));
        field.clear();
        field_was_quoted = false;
      } else if (c == '\n') {
        ++line;
        row_done = true;
      } else {
        field += c;
      }
    }
    fields.push_back(field_was_quoted ? field : std::string(Trim(field)));
    if (!have_header) {
      table.columns = std::move(fields);
      have_header = true;
      continue;
    }
    if (fields.size() > table.columns.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("line %d: %d fields, but the header names %d columns", row_line,
                          fields.size(), table.columns.size()));
    }
    fields.resize(table.columns.size());  // missing trailing fields are empty
    table.rows.push_back(std::move(fields));
    table.line_numbers.push_back(row_line);
  }
  if (!have_header) return absl::InvalidArgumentError("empty CSV: no header row");
  return table;
}

std::string CsvField(std::string_view field) {
  if (field.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open %s", path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

absl::Status WriteFile(const std::string& path, std::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrFormat("cannot write %s", path));
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrFormat("error writing %s", path));
  return absl::OkStatus();
}

}  // namespace rescale::sim
