/*
 * hash_bench.c - cr_hash over the keys the broker hashes most: entity ids,
 * expanded attribute IRIs and short terms. A benchmark, not a test: run it
 * under callgrind to count the instructions of cr_hash itself, e.g.
 *
 *   valgrind --tool=callgrind --toggle-collect=cr_hash build/release/perf/hash_bench
 *
 * and compare the Ir total with another build of src/core/hash.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

int main(int argc, char **argv)
{
    int      rounds = argc > 1 ? atoi(argv[1]) : 200;
    char     keys[1000][64];
    size_t   lens[1000];
    uint64_t sink = 0;

    for (int i = 0; i < 1000; i++) {
        switch (i % 3) {
        case 0: snprintf(keys[i], sizeof keys[i], "urn:ngsi-ld:Vehicle:%06d", i); break;
        case 1: snprintf(keys[i], sizeof keys[i], "https://uri.etsi.org/ngsi-ld/default-context/attr%d", i); break;
        default: snprintf(keys[i], sizeof keys[i], "t%d", i); break;
        }
        lens[i] = strlen(keys[i]);
    }
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 1000; i++)
            sink += cr_hash(keys[i], lens[i]);
    printf("%llx\n", (unsigned long long)sink);
    return 0;
}
