import { createHonoApp } from './apps/hono-app.js';
import { describeMatrix } from './matrix.js';

describeMatrix('hono', createHonoApp);
