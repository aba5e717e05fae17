// rescalectl as a library: the whole command line (parsing, RPCs, printing)
// behind one function, so tests run it in-process against a real server and
// compare what it prints. The rescalectl binary is a main() around RunCli.
//
// Exit codes: 0 success; 1 the server returned an error (printed as
// "Error from server (NotFound): ..."), a file could not be read or parsed,
// or `health` saw a status other than SERVING; 2 usage errors.
#ifndef RESCALE_CLIENT_RESCALECTL_CLI_H_
#define RESCALE_CLIENT_RESCALECTL_CLI_H_

#include <istream>
#include <ostream>
#include <string>
#include <vector>

namespace rescale::cli {

// Runs one rescalectl invocation. args[0] is the program name, as in argv.
// Results go to `out`, errors and hints to `err`; `-f -` reads std::cin.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The same, reading `-f -` from `in` (tests feed manifests through it).
int RunCli(const std::vector<std::string>& args, std::istream& in, std::ostream& out,
           std::ostream& err);

}  // namespace rescale::cli

#endif  // RESCALE_CLIENT_RESCALECTL_CLI_H_
