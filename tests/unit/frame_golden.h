/* frame_golden.h - rows of test_frame_golden.c's golden[] (type, message,
 * part lengths, part hashes, neighbours' return codes), printed by its
 * KVW_GOLDEN_PRINT=1 mode on the hand-written codec at d8be77e. Do not reprint
 * to make a failure go away. Reprinted once on purpose since: the XFER_INFO
 * (7) and RECV_BEGIN (13) rows, when both bodies gained the decode prefix
 * (u32 prefix_tokens, issue 32 item 4); every other row is d8be77e's. */
{ 1, 0, { 32, 85, 0 }, { 0x76eac70be30614bdull, 0xe3a430525dd2a0b3ull, 0xcbf29ce484222325ull }, 0xfd93b0de341e3891ull }, /* BOOT_REGISTER: 589 probes, texts 0xc7d49545ef5d08d3 */
{ 1, 1, { 32, 321, 0 }, { 0xa0a91fee0c878c92ull, 0x0384d0f0c60ddac6ull, 0xcbf29ce484222325ull }, 0x015f51846c727fe5ull }, /* BOOT_REGISTER: 1769 probes, texts 0x46f2a0c1ddb8973b */
{ 1, 2, { 32, 85, 0 }, { 0x1450b790c9b5d6c2ull, 0x99cb71cbd478e3b2ull, 0xcbf29ce484222325ull }, 0x5390b49d9bac8659ull }, /* BOOT_REGISTER: 589 probes, texts 0x41c9e57ce711f903 */
{ 2, 0, { 32, 40, 0 }, { 0x1853da660f3c1dd0ull, 0xc81c4cf2a8c7bb2full, 0xcbf29ce484222325ull }, 0x7a366fe1dad3c205ull }, /* BOOT_LOOKUP: 364 probes, texts 0xc0b1304b7fce9b47 */
{ 2, 1, { 32, 40, 0 }, { 0xfff7a1ff7d06c5c7ull, 0xef9c10d8973a8284ull, 0xcbf29ce484222325ull }, 0xb6355c5e8a494545ull }, /* BOOT_LOOKUP: 364 probes, texts 0x791effa1b14c3337 */
{ 2, 2, { 32, 40, 0 }, { 0x4a5224eaf3424aa3ull, 0x0d22091e5d6ef08full, 0xcbf29ce484222325ull }, 0x7a366fe1dad3c205ull }, /* BOOT_LOOKUP: 364 probes, texts 0xc0b1304b7fce9b47 */
{ 3, 0, { 32, 99, 0 }, { 0xdcd79e4785ef346bull, 0xd820b9a0f603c76dull, 0xcbf29ce484222325ull }, 0xae6e1c14b4009e05ull }, /* BOOT_REPLY: 659 probes, texts 0x652a0047f17389d0 */
{ 3, 1, { 32, 335, 0 }, { 0x2b2389cef618fafcull, 0x546f1d4fbc0e49f3ull, 0xcbf29ce484222325ull }, 0x04105c5f7c8924bdull }, /* BOOT_REPLY: 1839 probes, texts 0x8c4b0b2dea771798 */
{ 3, 2, { 32, 120, 0 }, { 0x136c0afb32257f64ull, 0xf4d9c4a9e65612c5ull, 0xcbf29ce484222325ull }, 0xbf5b4b8ac9da5021ull }, /* BOOT_REPLY: 764 probes, texts 0x0438d9c960e8b979 */
{ 4, 0, { 32, 0, 0 }, { 0xfb86c451522871b6ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* PING: 162 probes, texts 0x845c562dfa0a9f07 */
{ 4, 1, { 32, 0, 0 }, { 0xe2627f1afb338089ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* PING: 162 probes, texts 0x845c562dfa0a9f07 */
{ 4, 2, { 32, 0, 0 }, { 0x30f42d16bbbd8f4dull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* PING: 162 probes, texts 0x845c562dfa0a9f07 */
{ 5, 0, { 32, 0, 0 }, { 0x85ca8ea8fbadbb49ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* PONG: 162 probes, texts 0xf6defba810f0560e */
{ 5, 1, { 32, 0, 0 }, { 0x3201e423d452f1beull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* PONG: 162 probes, texts 0xf6defba810f0560e */
{ 5, 2, { 32, 0, 0 }, { 0xa4740fc894a8a07eull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* PONG: 162 probes, texts 0xf6defba810f0560e */
{ 6, 0, { 32, 169, 0 }, { 0xd9372f363abaa2fcull, 0x85404e7116b2b792ull, 0xcbf29ce484222325ull }, 0x5e2666cbe98d8681ull }, /* REGISTER: 1009 probes, texts 0x6ed5b9c39af1d1a7 */
{ 6, 1, { 32, 578, 0 }, { 0xf0c20ba52d63baf3ull, 0xf0f25c9b930c7644ull, 0xcbf29ce484222325ull }, 0xd47d4b10b2aa3d5dull }, /* REGISTER: 3054 probes, texts 0x606f83e43f1fed46 */
{ 6, 2, { 32, 169, 0 }, { 0x1c6b257397aae99full, 0x4c4b82439454db4bull, 0xcbf29ce484222325ull }, 0x716804042caebbd9ull }, /* REGISTER: 1009 probes, texts 0x7f4e617eac1c380f */
{ 7, 0, { 32, 21, 16 }, { 0xa9c6d4bde90064b7ull, 0xfc43ea1d669ea591ull, 0xe113cfe3f0db5147ull }, 0x30a1538c97a8097dull }, /* XFER_INFO: 287 probes, texts 0xe17a3cd6be76549c */
{ 7, 1, { 32, 21, 0 }, { 0x30bd9abfbe338428ull, 0x52ea78ee0d6817abull, 0xcbf29ce484222325ull }, 0x1044bfed2032b4adull }, /* XFER_INFO: 271 probes, texts 0xe4c446b4d6ebe8e8 */
{ 7, 2, { 32, 21, 16 }, { 0xe779eecd7751ab30ull, 0xd10808e157e9cebfull, 0xe113cfe3f0db5147ull }, 0xbac1f33290e8aa45ull }, /* XFER_INFO: 287 probes, texts 0x6a7827825cc223f8 */
{ 8, 0, { 32, 12, 0 }, { 0x9357fff497212bb2ull, 0x6dcb64d37c261815ull, 0xcbf29ce484222325ull }, 0x7e8061c937a78285ull }, /* ABORT: 224 probes, texts 0x27a21902d71641fc */
{ 8, 1, { 32, 12, 0 }, { 0xde9e3b0c5815d505ull, 0x5472800f0f3e0920ull, 0xcbf29ce484222325ull }, 0x20eee40ccb1456e9ull }, /* ABORT: 224 probes, texts 0x3531992c03e339ff */
{ 8, 2, { 32, 12, 0 }, { 0xd620260e64749759ull, 0x30c63726ac12fbd9ull, 0xcbf29ce484222325ull }, 0x20eee40ccb1456e9ull }, /* ABORT: 224 probes, texts 0x99216a82df1bbc0d */
{ 9, 0, { 32, 19, 0 }, { 0x63accf35668df725ull, 0x78699316a848787eull, 0xcbf29ce484222325ull }, 0x7b7291694dcdbb81ull }, /* STATUS: 259 probes, texts 0xa3dced3636d28510 */
{ 9, 1, { 32, 270, 0 }, { 0x6f972cbbe6fdb83aull, 0x314f80ea6fbc1c17ull, 0xcbf29ce484222325ull }, 0x23452f571270fb21ull }, /* STATUS: 1514 probes, texts 0x256eef56cf028732 */
{ 9, 2, { 32, 19, 0 }, { 0x753a3fde14ec21aaull, 0x92d8e7f40872b878ull, 0xcbf29ce484222325ull }, 0xe9b81a0977cd69e5ull }, /* STATUS: 259 probes, texts 0xf47ed052e4f66352 */
{ 10, 0, { 32, 8, 0 }, { 0x876b971d68cc5998ull, 0x7979a1b9cc1f91b4ull, 0xcbf29ce484222325ull }, 0x8e86fa0ca65d2d85ull }, /* ABORT_ACK: 204 probes, texts 0xfcbfcb01b68085aa */
{ 10, 1, { 32, 8, 0 }, { 0xe532f7a09de3496full, 0x8cf51a8bfca3883dull, 0xcbf29ce484222325ull }, 0x30f57c5039ca01e9ull }, /* ABORT_ACK: 204 probes, texts 0xfb0f16e593c467c5 */
{ 10, 2, { 32, 8, 0 }, { 0xadd023b715de53abull, 0x4f8a555d540fe9f5ull, 0xcbf29ce484222325ull }, 0x30f57c5039ca01e9ull }, /* ABORT_ACK: 204 probes, texts 0xfb0f16e593c467c5 */
{ 11, 0, { 32, 8, 0 }, { 0x74ae6cdfefe8e3f3ull, 0xc4adc05eaa0d1edaull, 0xcbf29ce484222325ull }, 0x30f57c5039ca01e9ull }, /* SEND_BEGIN: 204 probes, texts 0x07ff16d7525c5464 */
{ 11, 1, { 32, 8, 0 }, { 0x06a556e5f457c8a4ull, 0x4ebaad864bc6f2e1ull, 0xcbf29ce484222325ull }, 0x30f57c5039ca01e9ull }, /* SEND_BEGIN: 204 probes, texts 0x07ff16d7525c5464 */
{ 11, 2, { 32, 8, 0 }, { 0xd60c677d015bf30cull, 0xb97d68fbb47e4db5ull, 0xcbf29ce484222325ull }, 0x30f57c5039ca01e9ull }, /* SEND_BEGIN: 204 probes, texts 0x07ff16d7525c5464 */
{ 12, 0, { 32, 1, 16 }, { 0x260ff059d0f3785eull, 0xaf63bd4c8601b7dfull, 0xe113cfe3f0db5147ull }, 0xfbf1187877743555ull }, /* SEND_CHUNK: 187 probes, texts 0x035bee228dce10d8 */
{ 12, 1, { 32, 1, 0 }, { 0x913fe69830b63031ull, 0xaf63bc4c8601b62cull, 0xcbf29ce484222325ull }, 0x8ece17cd007d4705ull }, /* SEND_CHUNK: 171 probes, texts 0xa5b78cabdf6a5ae2 */
{ 12, 2, { 32, 1, 16 }, { 0x05555e6f6c8da275ull, 0xaf63bc4c8601b62cull, 0xe113cfe3f0db5147ull }, 0xfbf1187877743555ull }, /* SEND_CHUNK: 187 probes, texts 0x035bee228dce10d8 */
{ 13, 0, { 32, 27, 12 }, { 0x21d0d7dad5e632b1ull, 0xf0fd9ba74c42940eull, 0x7e3dacad03adfb14ull }, 0x5a581b1ed549bbf1ull }, /* RECV_BEGIN: 313 probes, texts 0x7a20af072823e15e */
{ 13, 1, { 32, 269, 0 }, { 0x57e845ec47d42b66ull, 0x4c6fb17a06ec7429ull, 0xcbf29ce484222325ull }, 0x6258abfcc73d6da9ull }, /* RECV_BEGIN: 1511 probes, texts 0xf2582ff2838c2d59 */
{ 13, 2, { 32, 27, 16 }, { 0xd850afb583a417a6ull, 0xd18dc8b410555738ull, 0xe113cfe3f0db5147ull }, 0x03b27e3d193b7105ull }, /* RECV_BEGIN: 317 probes, texts 0xbd2fbce598c15e67 */
{ 14, 0, { 32, 0, 0 }, { 0x0bce953e3c3d9dc4ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* RECV_ABORT: 162 probes, texts 0x5fa4c56545cb10d6 */
{ 14, 1, { 32, 0, 0 }, { 0x507de34152defa9bull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* RECV_ABORT: 162 probes, texts 0x5fa4c56545cb10d6 */
{ 14, 2, { 32, 0, 0 }, { 0xcbeb5c684a150047ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* RECV_ABORT: 162 probes, texts 0x5fa4c56545cb10d6 */
{ 15, 0, { 32, 0, 0 }, { 0x518e0c72f4306d3full, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* CLEAR: 162 probes, texts 0x372372fffabef6ef */
{ 15, 1, { 32, 0, 0 }, { 0x625c7069b63dabd0ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* CLEAR: 162 probes, texts 0x372372fffabef6ef */
{ 15, 2, { 32, 0, 0 }, { 0x7bb9feec5bc244b8ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull }, 0x825f7a36184b6e8dull }, /* CLEAR: 162 probes, texts 0x372372fffabef6ef */
{ 16, 0, { 32, 46, 72 }, { 0x00946bc4ea808e5aull, 0x9c223cd40a3462aeull, 0x3217dee65d98646dull }, 0x3a4283ba45755139ull }, /* JOB: 468 probes, texts 0x0b226e2f954d5af0 */
{ 16, 1, { 32, 293, 0 }, { 0xbbfe2559fd889eadull, 0xc32471ba64109087ull, 0xcbf29ce484222325ull }, 0x51494e30848ccb69ull }, /* JOB: 1631 probes, texts 0xdba6ef2e309e9c63 */
{ 16, 2, { 32, 65, 72 }, { 0x4b21fd5050b04601ull, 0x40aa08171c373ea6ull, 0x3217dee65d98646dull }, 0x58fc16b13dc50d6dull }, /* JOB: 563 probes, texts 0x3d1b3e9ad87a6041 */
{ 17, 0, { 32, 28, 0 }, { 0x38a83717b108388dull, 0x85f2064648e9e202ull, 0xcbf29ce484222325ull }, 0x597cbbf77e389ee5ull }, /* JOB_DONE: 304 probes, texts 0x15f49bf1bf70a78d */
{ 17, 1, { 32, 28, 0 }, { 0xeecc5cec267593e2ull, 0x0ee43f6f236165daull, 0xcbf29ce484222325ull }, 0x6089615d9f530c95ull }, /* JOB_DONE: 304 probes, texts 0xa31b7097f228ab63 */
{ 17, 2, { 32, 28, 0 }, { 0xdac8e5870d2b9292ull, 0xc0e02e03723b78faull, 0xcbf29ce484222325ull }, 0xd02d53367b73dad9ull }, /* JOB_DONE: 304 probes, texts 0xc6081f283aacdbb2 */
