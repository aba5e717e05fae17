// rescalectl's entry point: all behaviour lives in RunCli (client/rescalectl/cli.h)
// so that tests can run the same code in-process.
#include <iostream>
#include <string>
#include <vector>

#include "client/rescalectl/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return rescale::cli::RunCli(args, std::cout, std::cerr);
}
