import { createNestExpressApp, createNestFastifyApp } from './apps/nest-app.js';
import { describeMatrix } from './matrix.js';

describeMatrix('nest-express', createNestExpressApp);
describeMatrix('nest-fastify', createNestFastifyApp);
