package bench

import "os"

func overheadWanted() bool { return os.Getenv("TTFTLENS_BENCH_OVERHEAD") != "" }
