// CSV reading and writing (see csv.h).
#include "bench/sim/csv.h"

#include <fstream>

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

// Length of the well-formed UTF-8 sequence at the start of `s` (Unicode
// table 3-7: no overlong forms, surrogates or code points above U+10FFFF,
// what JSON writers accept), or 0 when it is not one.
size_t Utf8SequenceLength(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto continuation = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < s.size() && byte(i) >= lo && byte(i) <= hi;
  };
  const unsigned char b = byte(0);
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return continuation(1) ? 2 : 0;
  if (b >= 0xE0 && b <= 0xEF) {
    const unsigned char lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    return continuation(1, lo, hi) && continuation(2) ? 3 : 0;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    const unsigned char lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    return continuation(1, lo, hi) && continuation(2) && continuation(3) ? 4 : 0;
  }
  return 0;
}

// The 1-based line of the first byte that is not UTF-8, or 0.
int FirstNonUtf8Line(std::string_view text) {
  int line = 1;
  for (size_t i = 0; i < text.size();) {
    const size_t length = Utf8SequenceLength(text.substr(i));
    if (length == 0) return line;
    if (text[i] == '\n') ++line;
    i += length;
  }
  return 0;
}

}  // namespace

absl::StatusOr<CsvTable> ParseCsv(std::string_view text) {
  // Workloads are text: the same bytes written out as JSON Lines (and JSON
  // reports) must be UTF-8, and the JSONL reader rejects anything else.
  if (const int line = FirstNonUtf8Line(text); line != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("line %d: not UTF-8 text", line));
  }
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
  // Unquoted, a field that opens a line with '#' would read as a comment,
  // and leading or trailing blanks would be trimmed.
  const bool plain = field.find_first_of(",\"\n\r") == std::string_view::npos &&
                     (field.empty() || (field.front() != '#' && Trim(field) == field));
  if (plain) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
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
