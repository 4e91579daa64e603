/* Tenant-key test vectors from C: fairq_tenant_key is XXH3-64 with seed 0 over the raw bytes
 * (0 mapped to 1), the same on every build and CPU. tests/fleet_keys.rs builds this against the
 * library of the test run and against one built with -C target-cpu=native, and runs both. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fairq.h"

static int passed, failed;

static void expect_key(const char *name, const char *raw, size_t len, uint64_t want) {
    uint64_t got = 0;
    int rc = fairq_tenant_key(raw, len, &got);
    if (rc == FAIRQ_OK && got == want) {
        passed++;
    } else {
        failed++;
        printf("FAIL %s: rc %d key 0x%016llx, want 0x%016llx\n", name, rc,
               (unsigned long long) got, (unsigned long long) want);
    }
    printf("%s 0x%016llx\n", name, (unsigned long long) got);
}

int main(void) {
    char kib[1025];
    for (int i = 0; i < 64; i++) memcpy(kib + 16 * i, "0123456789abcdef", 16);
    kib[1024] = '\0';
    expect_key("acme", "acme", 4, 0x44ad98655d8858e1ULL);
    expect_key("1KiB", kib, 1024, 0x540ffccbf24ea528ULL);
    /* "naïve-租户" in UTF-8, spelled in bytes so the source stays ASCII. */
    expect_key("non-ascii", "na\xc3\xafve-\xe7\xa7\x9f\xe6\x88\xb7", 13, 0xd812649601f883b6ULL);
    /* The function over no bytes is 0x2d06800538d394c2, but the C API refuses an empty id. */
    uint64_t key = 7;
    if (fairq_tenant_key("", 0, &key) == FAIRQ_ERR_INVALID_ARGUMENT && key == 7) {
        passed++;
    } else {
        failed++;
        printf("FAIL empty: not refused\n");
    }
    printf("key_vectors: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
