/* Writes and reads a LUN with libiscsi (libiscsi-dev 1.19), over iSER or
 * TCP as the URL says, and checks every byte read back.
 *
 *   iscsi_rw INITIATOR_IQN URL MIB [SEED]
 *
 * URL: iser://HOST/TARGET_IQN/LUN or iscsi://HOST/TARGET_IQN/LUN. Writes
 * MIB MiB of a pattern from LBA 0 with WRITE16 in 256 KiB commands, reads
 * them back with READ16 in 64 KiB and 256 KiB commands, compares, and prints
 * "ok MIB MiB written and read back". Exit 0 only if every byte matched. */
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define BLOCK 512

int main(int argc, char **argv)
{
	if (argc < 4)
		DIE("usage: %s INITIATOR_IQN URL MIB [SEED]", argv[0]);
	size_t len = (size_t)atoi(argv[3]) << 20;
	uint32_t seed = argc > 4 ? (uint32_t)atoi(argv[4]) : 1;
	struct iscsi_context *iscsi = iscsi_create_context(argv[1]);
	if (!iscsi)
		DIE("iscsi_create_context");
	struct iscsi_url *url = iscsi_parse_full_url(iscsi, argv[2]);
	if (!url)
		DIE("bad URL %s: %s", argv[2], iscsi_get_error(iscsi));
	if (iscsi_init_transport(iscsi, url->transport))
		DIE("transport: %s", iscsi_get_error(iscsi));
	iscsi_set_targetname(iscsi, url->target);
	iscsi_set_session_type(iscsi, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(iscsi, ISCSI_HEADER_DIGEST_NONE_CRC32C);
	if (iscsi_full_connect_sync(iscsi, url->portal, url->lun))
		DIE("login to %s: %s", argv[2], iscsi_get_error(iscsi));
	unsigned char *data = malloc(len);
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		data[i] = (unsigned char)(x >> 16);
	}
	const size_t wchunk = 256 << 10;
	for (size_t off = 0; off < len; off += wchunk) {
		struct scsi_task *t = iscsi_write16_sync(iscsi, url->lun, off / BLOCK, data + off,
							  wchunk, BLOCK, 0, 0, 0, 0, 0);
		if (!t || t->status != SCSI_STATUS_GOOD)
			DIE("WRITE16 at %zu: %s", off, iscsi_get_error(iscsi));
		scsi_free_scsi_task(t);
	}
	/* libiscsi's iSER transport refuses commands of 512 KiB or more. */
	size_t rchunks[2] = { 64 << 10, 256 << 10 };
	for (int k = 0; k < 2; k++) {
		size_t rc = rchunks[k];
		for (size_t off = 0; off < len; off += rc) {
			struct scsi_task *t = iscsi_read16_sync(iscsi, url->lun, off / BLOCK, rc, BLOCK,
								 0, 0, 0, 0, 0);
			if (!t || t->status != SCSI_STATUS_GOOD)
				DIE("READ16 at %zu: %s", off, iscsi_get_error(iscsi));
			if ((size_t)t->datain.size != rc)
				DIE("READ16 at %zu: %d bytes", off, t->datain.size);
			for (size_t i = 0; i < rc; i++)
				if (t->datain.data[i] != data[off + i])
					DIE("byte %zu read back is %#x, written %#x", off + i,
					    t->datain.data[i], data[off + i]);
			scsi_free_scsi_task(t);
		}
	}
	iscsi_logout_sync(iscsi);
	iscsi_destroy_url(url);
	iscsi_destroy_context(iscsi);
	printf("ok %zu MiB written and read back\n", len >> 20);
	return 0;
}
