#pragma once

// Command-line flags of Ferry's programs (gflags), with a --help that shows the program's
// own flags only: gflags' plain --help lists every linked library's flags (glog's and
// gflags' own) before the program's. --helpfull still lists them all.

namespace ferry {

// gflags::ParseCommandLineFlags(argc, argv, true), except that --help (-help, --help=true)
// prints the usage message and the flags defined in `main_file` (the caller's __FILE__),
// then exits 0.
void ParseProgramFlags(int* argc, char*** argv, const char* main_file);

// True when argv asks for help (--help, -help, --help=true), before any "--".
bool AsksForHelp(int argc, char** argv);

}  // namespace ferry
