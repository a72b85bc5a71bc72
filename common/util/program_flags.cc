#include "common/util/program_flags.h"

#include <gflags/gflags.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ferry {

bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") return false;
    if (a == "--help" || a == "-help" || a == "--help=true" || a == "-help=true") return true;
  }
  return false;
}

void ParseProgramFlags(int* argc, char*** argv, const char* main_file) {
  if (AsksForHelp(*argc, *argv)) {
    const std::string program = (*argv)[0];  // gflags learns the name only while parsing
    std::printf("%s: %s\n", program.substr(program.rfind('/') + 1).c_str(), gflags::ProgramUsage());
    std::vector<gflags::CommandLineFlagInfo> flags;
    gflags::GetAllFlags(&flags);  // sorted by file, then name
    std::printf("\n  Flags:\n");
    for (const auto& f : flags) {
      if (f.filename == main_file) std::printf("%s", gflags::DescribeOneFlag(f).c_str());
    }
    std::printf("\n  --helpfull also lists the flags of glog and gflags.\n");
    std::exit(0);
  }
  gflags::ParseCommandLineFlags(argc, argv, true);
}

}  // namespace ferry
