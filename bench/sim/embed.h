// RESCALE_SIM_EMBED: the Pollux trace files (tests/data/pollux) pulled into
// the simulator's object files at compile time by the assembler's .incbin,
// with the directory given by the compile definition
// RESCALE_SIM_POLLUX_TRACES_DIR. That keeps a single copy of the data in
// the repo, unchanged, and a self-contained binary, without a generated
// source file. The build does not track the CSVs as dependencies; they are
// a frozen copy of a published artifact.
#ifndef RESCALE_BENCH_SIM_EMBED_H_
#define RESCALE_BENCH_SIM_EMBED_H_

#ifndef RESCALE_SIM_POLLUX_TRACES_DIR
#error "CMake must define RESCALE_SIM_POLLUX_TRACES_DIR (the repo's tests/data/pollux folder)"
#endif

// Defines `<symbol>_begin` and `<symbol>_end` around the bytes of `file`
// (relative to the traces folder), followed by a NUL so the text is also a
// C string. Use at namespace scope, once per symbol in the program.
#define RESCALE_SIM_EMBED(symbol, file)                   \
  __asm__(                                                \
      ".pushsection .rodata\n"                            \
      ".global " #symbol                                  \
      "_begin\n"                                          \
      ".hidden " #symbol "_begin\n" #symbol               \
      "_begin:\n"                                         \
      ".incbin \"" RESCALE_SIM_POLLUX_TRACES_DIR "/" file \
      "\"\n"                                              \
      ".global " #symbol                                  \
      "_end\n"                                            \
      ".hidden " #symbol "_end\n" #symbol                 \
      "_end:\n"                                           \
      ".byte 0\n"                                         \
      ".popsection\n");                                   \
  extern "C" const char symbol##_begin[];                 \
  extern "C" const char symbol##_end[];

#endif  // RESCALE_BENCH_SIM_EMBED_H_
